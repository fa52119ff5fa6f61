// Package btrfs is hearth's default layers.Store: every snapshot is a btrfs
// subvolume, so Prepare, Snapshot and Reset are one snapshot ioctl each,
// O(1) in the data written (see Store). It lives on the data dir itself
// when that is btrfs, else on a sparse image file loop-mounted under the
// data dir (see Open); SetLimit caps a sandbox's root with btrfs quotas.
// It is Linux only, needs root, and passes layers/layerstest; the slower
// fallback for kernels without btrfs is layers/overlay.
package btrfs
