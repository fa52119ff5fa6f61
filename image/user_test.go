package image_test

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/image"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/testenv"
)

const (
	userPasswd = "# accounts\n" +
		"root:x:0:0:root:/root:/bin/sh\n" +
		"app:x:1000:1001:App:/home/app:/bin/sh\n" +
		"nohome:x:1002:1002:::/bin/sh\n" +
		"rel:x:1003:1003::relative/home:/bin/sh\n" +
		"big:x:70000:70000::/big:/bin/false\n" +
		"svc:x:notanumber:1::/:/bin/false\n" +
		"short:x:7\n"
	userGroup = "root:x:0:\nwheel:x:10:\nstaff:x:50:app\napp:x:1001:\n"
)

// newRoot makes an empty root directory, mode 0755, owned by root.
type newRoot func(t *testing.T) string

// forEachRoot runs test, as a subtest, with roots made as plain
// directories ("dir"), and with roots that are active snapshots of each
// layer store (named after the backend), as a sandbox's or a build's
// root is.
func forEachRoot(t *testing.T, test func(t *testing.T, mk newRoot)) {
	t.Run("dir", func(t *testing.T) {
		test(t, func(t *testing.T) string {
			root := filepath.Join(t.TempDir(), "root")
			if err := os.Mkdir(root, 0o755); err != nil {
				t.Fatal(err)
			}
			return root
		})
	})
	forEachBackend(t, func(t *testing.T, b backend) {
		if os.Geteuid() != 0 {
			testenv.Skip(t, "needs root to mount layer stores")
		}
		ls := b.open(t, filepath.Join(t.TempDir(), "layers"))
		n := 0
		test(t, func(t *testing.T) string {
			n++
			root, err := ls.Prepare(t.Context(), fmt.Sprintf("root-%d", n), "")
			if err != nil {
				t.Fatal(err)
			}
			return root
		})
	})
}

// writeRoot makes a root directory with mk holding files (path →
// content).
func writeRoot(t *testing.T, mk newRoot, files map[string]string) string {
	t.Helper()
	root := mk(t)
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// userCase is a user to resolve and what it must resolve to, or the error
// it must give (a part of its message).
type userCase struct {
	user     string
	uid, gid int
	home     string
	err      string
}

// checkUsers resolves each case's user in the root at root.
func checkUsers(t *testing.T, root string, cases []userCase) {
	t.Helper()
	for _, tc := range cases {
		uid, gid, home, err := resolveIn(t, root, tc.user)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("resolveUser(%q) = %v, want %d:%d home %s", tc.user, err, tc.uid, tc.gid, tc.home)
		case tc.err == "" && (uid != tc.uid || gid != tc.gid || home != tc.home):
			t.Errorf("resolveUser(%q) = %d:%d home %s, want %d:%d home %s", tc.user, uid, gid, home, tc.uid, tc.gid, tc.home)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("resolveUser(%q) = %d:%d home %s, %v; want an error saying %s", tc.user, uid, gid, home, err, tc.err)
		}
	}
}

// resolveIn resolves user in root, failing t if that takes longer than 5
// seconds (a read that blocks).
func resolveIn(t *testing.T, root, user string) (uid, gid int, home string, err error) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		uid, gid, home, err = image.ResolveUserIn(root, user)
	}()
	select {
	case <-done:
		return uid, gid, home, err
	case <-time.After(5 * time.Second):
		t.Fatalf("resolveUser(%q) in %s still runs after 5s", user, root)
		return
	}
}

// TestResolveUser resolves the forms an image's user takes against an
// /etc/passwd and /etc/group.
func TestResolveUser(t *testing.T) {
	forEachRoot(t, testResolveUser)
}

func testResolveUser(t *testing.T, mk newRoot) {
	root := writeRoot(t, mk, map[string]string{"etc/passwd": userPasswd, "etc/group": userGroup})
	const notIn, ids = "is not in its", "a sandbox's ids are 0 to 65535"
	checkUsers(t, root, []userCase{
		{user: "", uid: 0, gid: 0, home: "/root"},
		{user: "root", uid: 0, gid: 0, home: "/root"},
		{user: "0", uid: 0, gid: 0, home: "/root"},
		{user: "app", uid: 1000, gid: 1001, home: "/home/app"},
		{user: "1000", uid: 1000, gid: 1001, home: "/home/app"},
		{user: "app:staff", uid: 1000, gid: 50, home: "/home/app"},
		{user: "app:50", uid: 1000, gid: 50, home: "/home/app"},
		{user: "1000:1000", uid: 1000, gid: 1000, home: "/home/app"},
		{user: "root:wheel", uid: 0, gid: 10, home: "/root"},
		// A uid no account has is used as it is, in group 0, as Docker
		// and containerd run it.
		{user: "4242", uid: 4242, gid: 0, home: "/"},
		{user: "4242:4343", uid: 4242, gid: 4343, home: "/"},
		{user: "4242:staff", uid: 4242, gid: 50, home: "/"},
		{user: "nohome", uid: 1002, gid: 1002, home: "/"},
		{user: "rel", uid: 1003, gid: 1003, home: "/"},
		{user: "ghost", err: `user "ghost" ` + notIn + " /etc/passwd"},
		{user: "svc", err: `user "svc" ` + notIn + " /etc/passwd"},
		{user: "short", err: `user "short" ` + notIn + " /etc/passwd"},
		{user: "app:ghosts", err: `group "ghosts" ` + notIn + " /etc/group"},
		{user: "big", err: ids},
		{user: "70000", err: ids},
		{user: "1000:70000", err: ids},
		{user: "-5", err: ids},
	})
	for _, user := range []string{"ghost", "big", "app:ghosts"} {
		if _, _, _, err := image.ResolveUserIn(root, user); !sandbox.IsCode(err, sandbox.CodeInvalidArgument) {
			t.Errorf("resolveUser(%q) = %v, want an invalid_argument error", user, err)
		}
	}

	// An image without /etc/passwd or /etc/group: numbers only.
	checkUsers(t, writeRoot(t, mk, nil), []userCase{
		{user: "", uid: 0, gid: 0, home: "/"},
		{user: "1000", uid: 1000, gid: 0, home: "/"},
		{user: "1000:1000", uid: 1000, gid: 1000, home: "/"},
		{user: "root", err: notIn},
		{user: "app", err: notIn},
		{user: "0:staff", err: notIn},
	})
}

// TestResolveUserSymlinks resolves users where /etc/passwd is a symlink:
// it is followed inside the root, whatever it says, and never reaches
// the host's files.
func TestResolveUserSymlinks(t *testing.T) {
	forEachRoot(t, testResolveUserSymlinks)
}

func testResolveUserSymlinks(t *testing.T, mk newRoot) {
	// hostFile is a file on the host, outside any root.
	hostFile := func(t *testing.T) string {
		p := filepath.Join(t.TempDir(), "outside", "passwd")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("root:x:0:0::/host:/bin/sh\napp:x:4444:4444::/host:/bin/sh\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	link := func(t *testing.T, root, target string) {
		if err := os.Symlink(target, filepath.Join(root, "etc/passwd")); err != nil {
			t.Fatal(err)
		}
	}
	// inRoot writes the passwd file body at the path p inside root.
	inRoot := func(t *testing.T, root, p, body string) {
		if err := os.MkdirAll(filepath.Join(root, path.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("absolute", func(t *testing.T) {
		root := writeRoot(t, mk, map[string]string{"etc/group": userGroup})
		host := hostFile(t)
		link(t, root, host)
		// The same path inside the root is what is read.
		inRoot(t, root, host, "app:x:1000:1001::/in/root:/bin/sh\n")
		checkUsers(t, root, []userCase{{user: "app", uid: 1000, gid: 1001, home: "/in/root"}})
	})
	t.Run("climbing", func(t *testing.T) {
		root := writeRoot(t, mk, map[string]string{"etc/group": userGroup})
		host := hostFile(t)
		// From the host's view: the host file.
		rel, err := filepath.Rel(filepath.Join(root, "etc"), host)
		if err != nil || !strings.HasPrefix(rel, "../") {
			t.Fatalf("Rel(%s/etc, %s) = %q, %v", root, host, rel, err)
		}
		link(t, root, rel)
		// Inside the root, ".." stops at the root.
		inRoot(t, root, path.Clean("/etc/"+rel), "app:x:2000:2000::/clamped:/bin/sh\n")
		checkUsers(t, root, []userCase{{user: "app", uid: 2000, gid: 2000, home: "/clamped"}})
	})
	t.Run("dangling inside", func(t *testing.T) {
		root := writeRoot(t, mk, map[string]string{"etc/group": userGroup})
		link(t, root, hostFile(t)) // there on the host only
		checkUsers(t, root, []userCase{
			{user: "", uid: 0, gid: 0, home: "/"},
			{user: "app", err: "is not in its /etc/passwd"},
		})
	})
	t.Run("loop", func(t *testing.T) {
		root := writeRoot(t, mk, nil)
		if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		link(t, root, "/etc/passwd")
		checkUsers(t, root, []userCase{{user: "app", err: "symbolic links"}})
	})
	t.Run("directory", func(t *testing.T) {
		root := writeRoot(t, mk, map[string]string{"etc/group": userGroup})
		link(t, root, "/etc")
		checkUsers(t, root, []userCase{{user: "", err: "not a regular file"}})
	})
}

// TestResolveUserSpecialFiles resolves users where /etc/passwd or
// /etc/group is a FIFO (nothing may block on it), a directory, or over
// the size read.
func TestResolveUserSpecialFiles(t *testing.T) {
	forEachRoot(t, testResolveUserSpecialFiles)
}

func testResolveUserSpecialFiles(t *testing.T, mk newRoot) {
	fifo := func(t *testing.T, name string) string {
		root := writeRoot(t, mk, map[string]string{"etc/passwd": userPasswd, "etc/group": userGroup})
		p := filepath.Join(root, name)
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
		return root
	}
	t.Run("passwd fifo", func(t *testing.T) {
		checkUsers(t, fifo(t, "etc/passwd"), []userCase{{user: "", err: "not a regular file"}})
	})
	t.Run("group fifo", func(t *testing.T) {
		checkUsers(t, fifo(t, "etc/group"), []userCase{
			{user: "app:staff", err: "not a regular file"},
			{user: "app", uid: 1000, gid: 1001, home: "/home/app"}, // the group file is not read
		})
	})
	t.Run("passwd directory", func(t *testing.T) {
		root := writeRoot(t, mk, map[string]string{"etc/passwd/x": ""})
		checkUsers(t, root, []userCase{{user: "", err: "not a regular file"}})
	})
	line := "app:x:1000:1001:App:/home/app:/bin/sh\n"
	padded := func(size int) string { // comment lines, then line, size bytes in all
		var b strings.Builder
		for b.Len()+len(line)+80 < size {
			b.WriteString("#" + strings.Repeat("-", 78) + "\n")
		}
		b.WriteString("#" + strings.Repeat("-", size-b.Len()-len(line)-2) + "\n")
		b.WriteString(line)
		if b.Len() != size {
			t.Fatalf("padded to %d bytes, want %d", b.Len(), size)
		}
		return b.String()
	}
	t.Run("passwd at the limit", func(t *testing.T) {
		root := writeRoot(t, mk, map[string]string{"etc/passwd": padded(image.MaxAccountFile)})
		checkUsers(t, root, []userCase{{user: "app", uid: 1000, gid: 1001, home: "/home/app"}})
	})
	t.Run("passwd over the limit", func(t *testing.T) {
		root := writeRoot(t, mk, map[string]string{"etc/passwd": padded(image.MaxAccountFile + 1)})
		checkUsers(t, root, []userCase{{user: "", err: "larger than"}, {user: "app", err: "larger than"}})
	})
	t.Run("group over the limit", func(t *testing.T) {
		root := writeRoot(t, mk, map[string]string{"etc/passwd": userPasswd})
		p := filepath.Join(root, "etc/group")
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, 1<<30); err != nil { // sparse: a gigabyte of zeros
			t.Fatal(err)
		}
		checkUsers(t, root, []userCase{
			{user: "app:staff", err: "larger than"},
			{user: "app", uid: 1000, gid: 1001, home: "/home/app"},
		})
	})
}
