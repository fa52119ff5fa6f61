package agent

import (
	"bufio"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/hearth/hearth/sandbox"
)

// owners names uids and gids from the sandbox's own /etc/passwd and
// /etc/group (the agent is static and has no NSS). Each operation makes its
// own, so a user added in the sandbox shows up at the next call; the files
// are read at most once per operation, and only when a name is needed.
type owners struct {
	users, groups map[uint32]string
}

func (o *owners) user(uid uint32) string {
	if o.users == nil {
		o.users = readIDNames("/etc/passwd")
	}
	return idName(o.users, uid)
}

func (o *owners) group(gid uint32) string {
	if o.groups == nil {
		o.groups = readIDNames("/etc/group")
	}
	return idName(o.groups, gid)
}

func idName(m map[uint32]string, id uint32) string {
	if name, ok := m[id]; ok {
		return name
	}
	return strconv.FormatUint(uint64(id), 10)
}

// readIDNames reads "name:x:id:..." lines. A missing or unreadable file
// yields an empty, non-nil map: owners then show as numbers.
func readIDNames(path string) map[uint32]string {
	m := map[uint32]string{}
	f, err := os.Open(path)
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.SplitN(sc.Text(), ":", 4)
		if len(fields) < 3 || fields[0] == "" || strings.HasPrefix(fields[0], "#") {
			continue
		}
		id, err := strconv.ParseUint(fields[2], 10, 32)
		if err != nil {
			continue
		}
		if _, dup := m[uint32(id)]; !dup { // the first entry wins, as in getpwuid
			m[uint32(id)] = fields[0]
		}
	}
	return m
}

// fileInfo describes the file at path (as the caller named it, resolved).
// With follow it describes what a symlink points to; without it, the link.
func (o *owners) fileInfo(path string, follow bool) (sandbox.FileInfo, error) {
	stat := os.Lstat
	if follow {
		stat = os.Stat
	}
	fi, err := stat(path)
	if err != nil {
		return sandbox.FileInfo{}, fsError(err, path)
	}
	return o.describe(path, fi), nil
}

// describe turns fi, the lstat or stat of path, into a FileInfo.
func (o *owners) describe(path string, fi fs.FileInfo) sandbox.FileInfo {
	info := sandbox.FileInfo{
		Name:    fi.Name(),
		Path:    path,
		Size:    fi.Size(),
		Mode:    fi.Mode() & modeBits,
		ModTime: fi.ModTime().UTC(),
	}
	if path == "/" {
		info.Name = "/"
	}
	switch m := fi.Mode(); {
	case m.IsRegular():
		info.Type = sandbox.FileRegular
	case m.IsDir():
		info.Type = sandbox.FileDir
	case m&fs.ModeSymlink != 0:
		info.Type = sandbox.FileSymlink
		info.Target, _ = os.Readlink(path)
	default:
		info.Type = sandbox.FileOther
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		info.Owner = o.user(st.Uid)
		info.Group = o.group(st.Gid)
	}
	return info
}
