package rootfs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// The sandbox user every command runs as by default.
const (
	User = "sandbox"
	UID  = 1000
	GID  = 1000
	Home = "/home/sandbox"
)

// Mount points the runtime driver uses; they must exist in every root
// filesystem: SocketDir empty, AgentDir holding only AgentFile.
const (
	// AgentDir is the directory of the agent's mount point.
	AgentDir = "/.hearth"
	// AgentFile is where the hearth-agent binary is mounted read-only
	// (driver/oci's AgentMount): an empty file in the image, so that a
	// start finds its mount point there and creates nothing in the
	// sandbox's root. A snapshot that a start writes to copies the tree
	// blocks it shares with every other sandbox of its image, which costs
	// more the more of them there are.
	AgentFile = AgentDir + "/hearth-agent"
	// SocketDir is where the agent's socket directory is mounted.
	SocketDir = "/run/hearth"
)

// Hostname is the image's /etc/hostname; the runtime sets each sandbox's.
const Hostname = "sandbox"

const hosts = `127.0.0.1	localhost
127.0.1.1	sandbox
::1	localhost ip6-localhost ip6-loopback
ff02::1	ip6-allnodes
ff02::2	ip6-allrouters
`

// resolvConf is a working default; the runtime may mount its own over it.
// debootstrap leaves a copy of the build host's, which names resolvers that
// only the build host can reach.
const resolvConf = `# hearth default; the runtime may replace this file.
nameserver 1.1.1.1
nameserver 8.8.8.8
options edns0
`

// customize turns a bare Debian root filesystem into hearth's image, with
// no chroot and no package manager, so it works on any bootstrap output
// (and on a test's fake):
//
//   - group and user sandbox, uid and gid 1000, home /home/sandbox (from
//     /etc/skel, owned 1000:1000), shell /bin/bash if there is one, else
//     /bin/sh, password locked;
//   - AgentDir holding only AgentFile, empty, and an empty SocketDir;
//   - /etc/hostname, /etc/hosts and /etc/resolv.conf as above, and an empty
//     /etc/machine-id if there is one, so clones do not share it;
//   - apt's caches and package lists removed (apt-get update restores
//     them), and debootstrap's log.
func customize(root string) error {
	shell := "/bin/sh"
	if _, err := os.Stat(filepath.Join(root, "bin/bash")); err == nil {
		shell = "/bin/bash"
	}
	for _, a := range []struct{ file, name, line string }{
		{"etc/group", User, fmt.Sprintf("%s:x:%d:", User, GID)},
		{"etc/gshadow", User, User + ":!::"},
		{"etc/passwd", User, fmt.Sprintf("%s:x:%d:%d:hearth sandbox:%s:%s", User, UID, GID, Home, shell)},
		{"etc/shadow", User, User + ":*::0:99999:7:::"},
	} {
		if err := addEntry(filepath.Join(root, a.file), a.name, a.line); err != nil {
			return err
		}
	}
	home := filepath.Join(root, Home)
	if err := os.MkdirAll(home, 0o755); err != nil {
		return err
	}
	if err := copySkel(filepath.Join(root, "etc/skel"), home); err != nil {
		return err
	}
	if err := chownTree(home, UID, GID); err != nil {
		return err
	}
	for _, d := range []string{AgentDir, SocketDir} {
		p := filepath.Join(root, d)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
		if err := os.Chmod(p, 0o755); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name, content string
		perm          os.FileMode
	}{
		{AgentFile, "", 0o755},
		{"etc/hostname", Hostname + "\n", 0o644},
		{"etc/hosts", hosts, 0o644},
		{"etc/resolv.conf", resolvConf, 0o644},
	} {
		p := filepath.Join(root, f.name)
		// A symlink (systemd-resolved's) would point outside the image.
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := os.WriteFile(p, []byte(f.content), f.perm); err != nil {
			return err
		}
	}
	if p := filepath.Join(root, "etc/machine-id"); exists(p) {
		if err := os.WriteFile(p, nil, 0o444); err != nil {
			return err
		}
	}
	for _, dir := range []string{"var/cache/apt", "var/lib/apt/lists"} {
		if err := emptyDir(filepath.Join(root, dir)); err != nil {
			return err
		}
	}
	for _, p := range []string{"var/log/bootstrap.log", "var/cache/debconf/templates.dat-old", "var/cache/debconf/config.dat-old"} {
		if err := os.Remove(filepath.Join(root, p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// localeDir is where glibc finds compiled locales, one directory each, and
// the archive that holds them in one file.
const localeDir = "usr/lib/locale"

// archiveLocales puts root's compiled locales (Debian's minbase has
// C.utf8, which every sandbox's LANG=C.UTF-8 names) into
// usr/lib/locale/locale-archive, with root's own localedef run chrooted
// into root. glibc then loads a locale by mapping that one file: `echo hi`
// makes 42 system calls instead of 108 (a dozen LC_* files, each opened,
// mapped and closed), which under gVisor saves ≈2 ms on every command
// (docs/BENCHMARKS.md). The directories stay, for programs that read them.
// A root with no localedef or no compiled locale (a test's fake) is left
// as it is.
func archiveLocales(ctx context.Context, root string) error {
	ctypes, err := filepath.Glob(filepath.Join(root, localeDir, "*", "LC_CTYPE"))
	if err != nil || len(ctypes) == 0 || !exists(filepath.Join(root, "usr/bin/localedef")) {
		return err
	}
	args := []string{"--add-to-archive", "--replace"}
	for _, c := range ctypes {
		args = append(args, "/"+filepath.Join(localeDir, filepath.Base(filepath.Dir(c))))
	}
	cmd := exec.CommandContext(ctx, "/usr/bin/localedef", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	cmd.Dir = "/"
	cmd.Env = []string{"LC_ALL=C", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("localedef --add-to-archive: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// addEntry appends line to the colon-separated database file (passwd,
// group, shadow, gshadow) unless an entry called name is there; it fails if
// the file names another entry with the same id (field 3) as line.
func addEntry(file, name, line string) error {
	data, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	fields := strings.Split(line, ":")
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if f[0] == name {
			return nil
		}
		if len(f) > 2 && len(fields) > 2 && (strings.HasSuffix(file, "passwd") || strings.HasSuffix(file, "group")) && f[2] == fields[2] {
			return fmt.Errorf("%s: id %s is taken by %s", file, f[2], f[0])
		}
	}
	mode := fs.FileMode(0o644)
	if fi, err := os.Stat(file); err == nil {
		mode = fi.Mode().Perm()
	} else if strings.HasSuffix(file, "shadow") {
		mode = 0o640
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		data = append(data, '\n')
	}
	data = append(data, line+"\n"...)
	return os.WriteFile(file, data, mode)
}

// copySkel copies the regular files and directories of skel into home.
func copySkel(skel, home string) error {
	err := filepath.WalkDir(skel, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(skel, p)
		dst := filepath.Join(home, rel)
		switch {
		case rel == ".":
			return nil
		case d.IsDir():
			return os.MkdirAll(dst, 0o755)
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(dst, data, 0o644)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func chownTree(root string, uid, gid int) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// emptyDir removes every file below dir and keeps the directories, which
// apt expects to find.
func emptyDir(dir string) error {
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		return os.Remove(p)
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
