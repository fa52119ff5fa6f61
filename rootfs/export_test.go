package rootfs

// ImportKey is importKey, for tests that fake a killed Import.
var ImportKey = importKey
