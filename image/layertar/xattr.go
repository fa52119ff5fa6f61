package layertar

import (
	"archive/tar"
	"errors"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// paxXattr prefixes the PAX records that carry extended attributes.
const paxXattr = "SCHILY.xattr."

// xattr is one extended attribute.
type xattr struct {
	name  string
	value string
}

// xattrs returns the extended attributes h carries, sorted by name.
func xattrs(h *tar.Header) []xattr {
	var xs []xattr
	for k, v := range h.PAXRecords {
		if name, ok := strings.CutPrefix(k, paxXattr); ok {
			xs = append(xs, xattr{name: name, value: v})
		}
	}
	sort.Slice(xs, func(i, j int) bool { return xs[i].name < xs[j].name })
	return xs
}

// keptXattr reports whether the extended attribute name is carried by a
// layer onto a file (regular is true) or a directory: user.* on both, and
// file capabilities on regular files. Apply sets no other, and Write
// writes no other.
func keptXattr(name string, regular bool) bool {
	return strings.HasPrefix(name, "user.") || regular && name == "security.capability"
}

// setXattrs sets the extended attributes of h that are kept on the file
// or directory open as fd, and notes the others. One the filesystem does
// not support is noted; one the kernel rejects refuses the entry.
func (a *applier) setXattrs(h *tar.Header, fd int) error {
	regular := h.Typeflag != tar.TypeDir
	rel, _ := cleanName(h.Name)
	for _, x := range xattrs(h) {
		if !keptXattr(x.name, regular) {
			a.st.note(rel, "extended attribute "+x.name+" skipped")
			continue
		}
		err := unix.Fsetxattr(fd, x.name, []byte(x.value), 0)
		if errors.Is(err, unix.ENOTSUP) {
			a.st.note(rel, "extended attribute "+x.name+" not supported here, skipped")
			continue
		}
		if err != nil {
			return fsError(h.Name, "setting extended attribute "+x.name, err)
		}
	}
	return nil
}

// readXattrs returns the kept extended attributes of the file or
// directory open as fd, as PAX records, or nil when it has none.
func readXattrs(fd int, regular bool) (map[string]string, error) {
	size, err := unix.Flistxattr(fd, nil)
	if err != nil || size == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			err = nil
		}
		return nil, err
	}
	buf := make([]byte, size)
	size, err = unix.Flistxattr(fd, buf)
	if err != nil {
		return nil, err
	}
	var recs map[string]string
	for name := range strings.SplitSeq(strings.TrimSuffix(string(buf[:size]), "\x00"), "\x00") {
		if !keptXattr(name, regular) {
			continue
		}
		v, err := getXattr(fd, name)
		if errors.Is(err, unix.ENODATA) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		if recs == nil {
			recs = map[string]string{}
		}
		recs[paxXattr+name] = v
	}
	return recs, nil
}

// getXattr returns the value of the extended attribute name of fd.
func getXattr(fd int, name string) (string, error) {
	for {
		size, err := unix.Fgetxattr(fd, name, nil)
		if err != nil {
			return "", err
		}
		buf := make([]byte, size)
		n, err := unix.Fgetxattr(fd, name, buf)
		if err == unix.ERANGE {
			continue // it grew meanwhile
		}
		return string(buf[:n]), err
	}
}
