package image

// ResolveUserIn is resolveUser against the root at dir.
func ResolveUserIn(dir, user string) (uid, gid int, home string, err error) {
	root, err := openRoot(dir)
	if err != nil {
		return 0, 0, "", err
	}
	defer root.Close()
	return resolveUser(root, user)
}

// MaxAccountFile is the largest /etc/passwd or /etc/group read.
const MaxAccountFile = maxAccountFile
