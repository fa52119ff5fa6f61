package image

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/sandbox"
)

// An image's root is attacker input: every path in it is resolved with
// openat2 inside the root (RESOLVE_IN_ROOT: a symlink, absolute or with
// "..", is taken relative to the root and cannot climb out), and no magic
// link is followed.
const inRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// maxAccountFile is the largest /etc/passwd or /etc/group read.
const maxAccountFile = 4 << 20

// maxID is the largest uid or gid a sandbox's user may have: a runc or
// crun sandbox maps 0–65535 into its user namespace.
const maxID = 65535

// openRoot opens the directory dir (a snapshot's host path, which the
// node made and the sandbox cannot replace) as the root paths resolve in.
func openRoot(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// openIn opens name inside root with flags: every symlink on the way, the
// last element's too unless flags has O_NOFOLLOW, is resolved inside root
// (see inRoot).
func openIn(root *os.File, name string, flags uint64, mode uint64) (*os.File, error) {
	how := unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Mode: mode, Resolve: inRoot}
	for range 8 {
		fd, err := unix.Openat2(int(root.Fd()), name, &how)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "openat2", Path: name, Err: err}
		}
		return os.NewFile(uintptr(fd), name), nil
	}
	return nil, &os.PathError{Op: "openat2", Path: name, Err: unix.EAGAIN}
}

// readIn reads the regular file name inside root, at most limit bytes; a
// missing file is nil, nil. A symlink is followed inside root (an image's
// /etc/passwd may be one); anything but a regular file at its end is
// refused, and opening one never blocks (O_NONBLOCK: a FIFO).
func readIn(root *os.File, name string, limit int64) ([]byte, error) {
	f, err := openIn(root, name, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, limit)
	}
	return data, nil
}

// mkdirIn makes the directory name inside root, owned by uid and gid
// with mode perm, and its missing parents (root's, mode 0755); what exists
// is left as it is, but must be a directory or a symlink to one, which is
// followed inside root.
func mkdirIn(root *os.File, name string, perm uint32, uid, gid int) error {
	name = path.Clean("/" + name)
	if name == "/" {
		return nil
	}
	if d, err := openIn(root, name, unix.O_PATH|unix.O_DIRECTORY, 0); err == nil {
		return d.Close()
	}
	if err := mkdirIn(root, path.Dir(name), 0o755, 0, 0); err != nil {
		return err
	}
	parent, err := openIn(root, path.Dir(name), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer parent.Close()
	base := path.Base(name)
	if err := unix.Mkdirat(int(parent.Fd()), base, perm); err != nil && err != unix.EEXIST {
		return &os.PathError{Op: "mkdirat", Path: name, Err: err}
	} else if err == unix.EEXIST {
		d, err := openIn(root, name, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return fmt.Errorf("%s exists and is not a directory", name)
		}
		return d.Close()
	}
	if err := unix.Fchownat(int(parent.Fd()), base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "fchownat", Path: name, Err: err}
	}
	return unix.Fchmodat(int(parent.Fd()), base, perm, 0)
}

// fileIn makes name inside root an empty regular file owned by root with
// mode perm, unless a regular file is there already, which is left as it
// is; anything else there (a symlink, a directory) is an error. Its parent
// must exist.
func fileIn(root *os.File, name string, perm uint32) error {
	f, err := openIn(root, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, uint64(perm))
	if errors.Is(err, unix.EEXIST) {
		f, err = openIn(root, name, unix.O_PATH|unix.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
			return fmt.Errorf("%s exists and is not a regular file", name)
		}
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Chown(0, 0); err != nil {
		return err
	}
	return f.Chmod(os.FileMode(perm))
}

// account is one line of /etc/passwd or /etc/group: name, id, and for a
// user the primary group and home.
type account struct {
	name      string
	id, group int
	home      string
}

// parseAccounts reads passwd(5) or group(5) lines (name:x:id:gid:…:home:…).
// Lines it cannot read are skipped.
func parseAccounts(data []byte, passwd bool) []account {
	var out []account
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxAccountFile)
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) < 3 || strings.HasPrefix(f[0], "#") {
			continue
		}
		id, err := strconv.Atoi(f[2])
		if err != nil {
			continue
		}
		a := account{name: f[0], id: id}
		if passwd {
			if len(f) < 6 {
				continue
			}
			if a.group, err = strconv.Atoi(f[3]); err != nil {
				continue
			}
			a.home = f[5]
		}
		out = append(out, a)
	}
	return out
}

// lookup finds the account named or numbered s.
func lookup(accounts []account, s string) (account, bool) {
	n, numeric := strconv.Atoi(s)
	for _, a := range accounts {
		if a.name == s || (numeric == nil && a.id == n) {
			return a, true
		}
	}
	return account{}, false
}

// resolveUser resolves the image's User ("", "name", "uid", "name:group",
// "uid:gid", …) against the image's /etc/passwd and /etc/group, as the
// OCI image spec says: an empty user is root; a name must be in passwd,
// a number need not be (its group is then 0, unless one is given). The
// home is the user's passwd entry's ("/" when it has none).
func resolveUser(root *os.File, user string) (uid, gid int, home string, err error) {
	passwdData, err := readIn(root, "/etc/passwd", maxAccountFile)
	if err != nil {
		return 0, 0, "", err
	}
	users := parseAccounts(passwdData, true)
	name, group, hasGroup := strings.Cut(user, ":")
	if name == "" {
		name = "0"
	}
	home = "/"
	a, found := lookup(users, name)
	switch n, err := strconv.Atoi(name); {
	case found:
		uid, gid, home = a.id, a.group, a.home
	case err == nil:
		uid, gid = n, 0 // as Docker and containerd run a uid no account has
	default:
		return 0, 0, "", sandbox.Errorf(sandbox.CodeInvalidArgument, "the image's user %q is not in its /etc/passwd", user)
	}
	if hasGroup {
		groupData, err := readIn(root, "/etc/group", maxAccountFile)
		if err != nil {
			return 0, 0, "", err
		}
		g, found := lookup(parseAccounts(groupData, false), group)
		n, nerr := strconv.Atoi(group)
		switch {
		case found:
			gid = g.id
		case nerr == nil:
			gid = n
		default:
			return 0, 0, "", sandbox.Errorf(sandbox.CodeInvalidArgument, "the image's group %q is not in its /etc/group", group)
		}
	}
	if uid < 0 || uid > maxID || gid < 0 || gid > maxID {
		return 0, 0, "", sandbox.Errorf(sandbox.CodeInvalidArgument, "the image's user %q is uid %d, gid %d: a sandbox's ids are 0 to %d", user, uid, gid, maxID)
	}
	if home == "" || !path.IsAbs(home) {
		home = "/"
	}
	return uid, gid, path.Clean(home), nil
}
