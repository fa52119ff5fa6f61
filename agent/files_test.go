package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/sandbox"
)

func owner(t testing.TB, path string) (uid, gid uint32) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}

// tempFiles lists the agent's temporary files left in dir.
func tempFiles(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, ".hearth-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestWriteReadRoundTrip(t *testing.T) {
	c, home := startServer(t, agent.Options{})
	data := randomBytes(t, 1<<20)
	info, err := c.WriteFile(ctxT(t, 20*time.Second), sandbox.WriteRequest{Path: "a/b/c/data.bin", Parents: true}, bytes.NewReader(data))
	if err != nil {
		t.Fatalf("WriteFile = %v", err)
	}
	path := filepath.Join(home, "a/b/c/data.bin")
	want := sandbox.FileInfo{Name: "data.bin", Path: path, Type: sandbox.FileRegular, Size: 1 << 20, Mode: 0o644,
		Owner: "nobody", Group: "nogroup", ModTime: info.ModTime}
	if info != want {
		t.Errorf("WriteFile = %+v, want %+v", info, want)
	}
	for _, p := range []string{"a", "a/b", "a/b/c", "a/b/c/data.bin"} {
		if uid, gid := owner(t, filepath.Join(home, p)); uid != nobody || gid != nobody {
			t.Errorf("%s belongs to %d:%d, want the sandbox user", p, uid, gid)
		}
	}
	if fi, _ := os.Stat(filepath.Join(home, "a/b")); fi.Mode().Perm() != 0o755 {
		t.Errorf("created parent mode %v, want 0755", fi.Mode().Perm())
	}
	var got bytes.Buffer
	if err := c.ReadFile(ctxT(t, 20*time.Second), path, &got); err != nil {
		t.Fatalf("ReadFile = %v", err)
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Errorf("ReadFile returned %d bytes, want the %d written", got.Len(), len(data))
	}
	if left := tempFiles(t, filepath.Dir(path)); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestWriteModes(t *testing.T) {
	c, home := startServer(t, agent.Options{})
	writeFile(t, filepath.Join(home, "run.sh"), []byte("#!/bin/sh\necho old\n"), 0o755)
	// A root file in the user's directory: the user may replace it (as mv
	// would), but not give the new one to root.
	rootFile := filepath.Join(home, "root.sh")
	if err := os.WriteFile(rootFile, []byte("#!/bin/sh\necho old\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(rootFile, 0o755)
	tests := []struct {
		name      string
		req       sandbox.WriteRequest
		wantMode  fs.FileMode
		wantOwner uint32
	}{
		{"overwrite keeps mode and owner", sandbox.WriteRequest{Path: "run.sh", Mode: 0o600}, 0o755, nobody},
		{"set mode on overwrite", sandbox.WriteRequest{Path: "run.sh", Mode: 0o700, SetMode: true}, 0o700, nobody},
		{"overwrite of a root file in the user's directory", sandbox.WriteRequest{Path: "root.sh"}, 0o755, nobody},
		{"new file default mode", sandbox.WriteRequest{Path: "new.txt"}, 0o644, nobody},
		{"new file with mode", sandbox.WriteRequest{Path: "secret.txt", Mode: 0o600}, 0o600, nobody},
		{"new file setuid", sandbox.WriteRequest{Path: "suid", Mode: 0o755 | fs.ModeSetuid}, 0o755 | fs.ModeSetuid, nobody},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			info, err := c.WriteFile(ctxT(t, 10*time.Second), tc.req, strings.NewReader("#!/bin/sh\necho new\n"))
			if err != nil {
				t.Fatal(err)
			}
			if info.Mode != tc.wantMode {
				t.Errorf("WriteFile(%+v).Mode = %v, want %v", tc.req, info.Mode, tc.wantMode)
			}
			p := filepath.Join(home, tc.req.Path)
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode() & (fs.ModePerm | fs.ModeSetuid); got != tc.wantMode {
				t.Errorf("mode on disk = %v, want %v", got, tc.wantMode)
			}
			if uid, _ := owner(t, p); uid != tc.wantOwner {
				t.Errorf("owner on disk = %d, want %d", uid, tc.wantOwner)
			}
		})
	}
	t.Run("an edited script still runs", func(t *testing.T) {
		writeFile(t, filepath.Join(home, "tool.sh"), []byte("#!/bin/sh\necho old\n"), 0o755)
		if _, err := c.WriteFile(ctxT(t, 10*time.Second), sandbox.WriteRequest{Path: "tool.sh"}, strings.NewReader("#!/bin/sh\necho new\n")); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		res, err := c.Exec(ctxT(t, 10*time.Second), sandbox.ExecRequest{Argv: []string{"./tool.sh"}}, nil, &out, nil)
		if err != nil || res.ExitCode != 0 || out.String() != "new\n" {
			t.Errorf("Exec(./run.sh) = %+v, %q, %v", res, out.String(), err)
		}
	})
}

func TestWriteThroughSymlink(t *testing.T) {
	c, home := startServer(t, agent.Options{})
	writeFile(t, filepath.Join(home, "real.txt"), []byte("old"), 0o640)
	if err := os.Symlink("real.txt", filepath.Join(home, "link.txt")); err != nil {
		t.Fatal(err)
	}
	info, err := c.WriteFile(ctxT(t, 10*time.Second), sandbox.WriteRequest{Path: "link.txt"}, strings.NewReader("new"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Path != filepath.Join(home, "real.txt") || info.Mode != 0o640 {
		t.Errorf("WriteFile(link) = %+v, want the target's info", info)
	}
	if fi, _ := os.Lstat(filepath.Join(home, "link.txt")); fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("link.txt is no longer a symlink")
	}
	if b, _ := os.ReadFile(filepath.Join(home, "real.txt")); string(b) != "new" {
		t.Errorf("target holds %q, want new", b)
	}
}

func TestWriteTooLargeKeepsNothing(t *testing.T) {
	c, home := startServer(t, agent.Options{})
	path := filepath.Join(home, "keep.txt")
	writeFile(t, path, []byte("original"), 0o644)
	for _, size := range []int{1001, 4 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			_, err := c.WriteFile(ctxT(t, 20*time.Second), sandbox.WriteRequest{Path: "keep.txt", MaxBytes: 1000},
				bytes.NewReader(randomBytes(t, size)))
			wantCode(t, err, sandbox.CodeTooLarge)
			if e := sandbox.AsError(err); fmt.Sprint(e.Details["max_bytes"]) != "1000" {
				t.Errorf("details = %v, want max_bytes 1000", e.Details)
			}
			if b, _ := os.ReadFile(path); string(b) != "original" {
				t.Errorf("file holds %d bytes after too_large, want the original", len(b))
			}
			if left := tempFiles(t, home); len(left) != 0 {
				t.Errorf("temporary files left: %v", left)
			}
		})
	}
	t.Run("exactly the limit", func(t *testing.T) {
		if _, err := c.WriteFile(ctxT(t, 10*time.Second), sandbox.WriteRequest{Path: "keep.txt", MaxBytes: 8}, strings.NewReader("12345678")); err != nil {
			t.Errorf("WriteFile of MaxBytes bytes = %v", err)
		}
	})
}

func TestWriteBrokenConnectionKeepsNothing(t *testing.T) {
	c, home, sock := startServerSock(t, agent.Options{})
	path := filepath.Join(home, "keep.txt")
	writeFile(t, path, []byte("original"), 0o644)

	t.Run("raw connection closed before EOF", func(t *testing.T) {
		conn := rawCall(t, sock, agent.Request{Op: agent.OpWrite, Write: &sandbox.WriteRequest{Path: "keep.txt"}})
		if err := agent.WriteFrame(conn, agent.FrameData, randomBytes(t, 100<<10)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "no temporary file appeared", func() bool { return len(tempFiles(t, home)) == 1 })
		conn.Close()
		waitFor(t, 5*time.Second, "temporary file left after the connection broke", func() bool { return len(tempFiles(t, home)) == 0 })
		if b, _ := os.ReadFile(path); string(b) != "original" {
			t.Errorf("file holds %d bytes, want the original", len(b))
		}
	})
	t.Run("client context cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		r := &stallingReader{data: randomBytes(t, 100<<10), stalled: make(chan struct{}), release: ctx.Done()}
		go func() {
			<-r.stalled
			waitFor(t, 5*time.Second, "no temporary file appeared", func() bool { return len(tempFiles(t, home)) == 1 })
			cancel()
		}()
		_, err := c.WriteFile(ctx, sandbox.WriteRequest{Path: "keep.txt"}, r)
		if err != context.Canceled {
			t.Errorf("WriteFile after cancel = %v, want context.Canceled", err)
		}
		waitFor(t, 5*time.Second, "temporary file left after cancel", func() bool { return len(tempFiles(t, home)) == 0 })
		if b, _ := os.ReadFile(path); string(b) != "original" {
			t.Errorf("file holds %d bytes, want the original", len(b))
		}
	})
}

// stallingReader returns data, then blocks until release.
type stallingReader struct {
	data    []byte
	stalled chan struct{}
	release <-chan struct{}
}

func (r *stallingReader) Read(p []byte) (int, error) {
	if len(r.data) > 0 {
		n := copy(p, r.data)
		r.data = r.data[n:]
		return n, nil
	}
	close(r.stalled)
	<-r.release
	return 0, io.ErrUnexpectedEOF
}

// rawCall dials the agent at sock and sends req, for tests of the protocol
// itself.
func rawCall(t testing.TB, sock string, req agent.Request) net.Conn {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := agent.WriteJSON(conn, agent.FrameRequest, req); err != nil {
		t.Fatal(err)
	}
	return conn
}

func TestFileErrors(t *testing.T) {
	c, home := startServer(t, agent.Options{})
	writeFile(t, filepath.Join(home, "file"), []byte("x"), 0o644)
	os.MkdirAll(filepath.Join(home, "full/sub"), 0o755)
	os.Mkdir(filepath.Join(home, "dir"), 0o755)
	ctx := ctxT(t, 30*time.Second)
	read := func(p string) error { return c.ReadFile(ctx, p, io.Discard) }
	tests := []struct {
		name string
		err  error
		code sandbox.Code
	}{
		{"stat missing", second(c.Stat(ctx, "missing")), sandbox.CodeNotFound},
		{"read missing", read("missing"), sandbox.CodeNotFound},
		{"read directory", read("dir"), sandbox.CodeInvalidArgument},
		{"read NUL path", read("a\x00b"), sandbox.CodeInvalidArgument},
		{"read below a file", read("file/x"), sandbox.CodeInvalidArgument},
		{"list missing", second(c.List(ctx, "missing")), sandbox.CodeNotFound},
		{"list a file", second(c.List(ctx, "file")), sandbox.CodeInvalidArgument},
		{"write missing parent", second(c.WriteFile(ctx, sandbox.WriteRequest{Path: "no/such/f"}, strings.NewReader("x"))), sandbox.CodeNotFound},
		{"write onto a directory", second(c.WriteFile(ctx, sandbox.WriteRequest{Path: "dir"}, strings.NewReader("x"))), sandbox.CodeInvalidArgument},
		{"write NUL path", second(c.WriteFile(ctx, sandbox.WriteRequest{Path: "a\x00"}, strings.NewReader("x"))), sandbox.CodeInvalidArgument},
		{"write bad mode", second(c.WriteFile(ctx, sandbox.WriteRequest{Path: "m", Mode: fs.ModeDir | 0o755}, strings.NewReader("x"))), sandbox.CodeInvalidArgument},
		{"mkdir over a file", second(c.Mkdir(ctx, "file")), sandbox.CodeAlreadyExists},
		{"mkdir below a file", second(c.Mkdir(ctx, "file/sub")), sandbox.CodeInvalidArgument},
		{"remove missing", c.Remove(ctx, "missing", false), sandbox.CodeNotFound},
		{"remove missing recursive", c.Remove(ctx, "missing", true), sandbox.CodeNotFound},
		{"remove non-empty dir", c.Remove(ctx, "full", false), sandbox.CodeInvalidArgument},
		{"remove /", c.Remove(ctx, "/", true), sandbox.CodeInvalidArgument},
		{"remove / by dots", c.Remove(ctx, "/tmp/../", true), sandbox.CodeInvalidArgument},
		{"rename /", second(c.Rename(ctx, "/", "x")), sandbox.CodeInvalidArgument},
		{"rename onto /", second(c.Rename(ctx, "file", "/")), sandbox.CodeInvalidArgument},
		{"rename missing", second(c.Rename(ctx, "missing", "x")), sandbox.CodeNotFound},
		{"rename into missing dir", second(c.Rename(ctx, "file", "no/such/x")), sandbox.CodeNotFound},
		{"rename onto a directory", second(c.Rename(ctx, "file", "dir")), sandbox.CodeAlreadyExists},
		{"chmod missing", second(c.Chmod(ctx, "missing", 0o644)), sandbox.CodeNotFound},
		{"chmod bad mode", second(c.Chmod(ctx, "file", fs.ModeDir|0o644)), sandbox.CodeInvalidArgument},
		{"empty path", second(c.Stat(ctx, "")), sandbox.CodeInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, tc.err, tc.code)
			if e := sandbox.AsError(tc.err); strings.Contains(e.Message, ".hearth-") {
				t.Errorf("message %q names the agent's temporary file", e.Message)
			}
		})
	}
	t.Run("not_found message names the path", func(t *testing.T) {
		err := read("missing")
		if want := "no such file: " + filepath.Join(home, "missing"); sandbox.AsError(err).Message != want {
			t.Errorf("message = %q, want %q", sandbox.AsError(err).Message, want)
		}
	})
	t.Run("error comes before any data", func(t *testing.T) {
		var w bytes.Buffer
		if err := c.ReadFile(ctx, "missing", &w); err == nil || w.Len() != 0 {
			t.Errorf("ReadFile(missing) = %v after writing %d bytes", err, w.Len())
		}
	})
}

func second[T any](_ T, err error) error { return err }

func TestListAndStat(t *testing.T) {
	c, home := startServer(t, agent.Options{})
	writeFile(t, filepath.Join(home, "b.txt"), []byte("hello"), 0o640)
	if err := os.Mkdir(filepath.Join(home, "a-dir"), 0o750|fs.ModeSticky); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(home, "a-dir"), 0o750|fs.ModeSticky)
	if err := os.Symlink("b.txt", filepath.Join(home, "c-link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(home, "d-fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 10*time.Second)
	got, err := c.List(ctx, ".")
	if err != nil {
		t.Fatal(err)
	}
	want := []sandbox.FileInfo{
		{Name: "a-dir", Type: sandbox.FileDir, Mode: 0o750 | fs.ModeSticky, Owner: "root", Group: "root"},
		{Name: "b.txt", Type: sandbox.FileRegular, Size: 5, Mode: 0o640, Owner: "nobody", Group: "nogroup"},
		{Name: "c-link", Type: sandbox.FileSymlink, Size: 5, Mode: 0o777, Owner: "root", Group: "root", Target: "b.txt"},
		{Name: "d-fifo", Type: sandbox.FileOther, Mode: 0o600, Owner: "root", Group: "root"},
	}
	if len(got) != len(want) {
		t.Fatalf("List = %+v, want %d entries", got, len(want))
	}
	for i := range want {
		want[i].Path = filepath.Join(home, want[i].Name)
		g := got[i]
		if want[i].Type == sandbox.FileDir {
			g.Size = 0
		}
		if g.ModTime.IsZero() || time.Since(g.ModTime) > time.Hour {
			t.Errorf("entry %d mtime %v", i, g.ModTime)
		}
		g.ModTime = time.Time{}
		if g != want[i] {
			t.Errorf("List[%d] = %+v, want %+v", i, g, want[i])
		}
	}

	info, err := c.Stat(ctx, filepath.Join(home, "c-link"))
	if err != nil || info.Type != sandbox.FileSymlink || info.Target != "b.txt" {
		t.Errorf("Stat(c-link) = %+v, %v; want the link itself", info, err)
	}
	info, err = c.Stat(ctx, "/")
	if err != nil || info.Name != "/" || info.Path != "/" || info.Type != sandbox.FileDir {
		t.Errorf("Stat(/) = %+v, %v", info, err)
	}
	t.Run("reading a fifo is refused, not blocked", func(t *testing.T) {
		wantCode(t, c.ReadFile(ctx, "d-fifo", io.Discard), sandbox.CodeInvalidArgument)
	})
}

func TestListLargeDirectory(t *testing.T) {
	c, home := startServer(t, agent.Options{})
	dir := filepath.Join(home, "many")
	os.Mkdir(dir, 0o755)
	const n = 3000 // with long names, several data frames
	for i := range n {
		name := fmt.Sprintf("%04d-%s", i, strings.Repeat("n", 200))
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.List(ctxT(t, 30*time.Second), "many")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("List returned %d entries, want %d", len(got), n)
	}
	for i, e := range got {
		if !strings.HasPrefix(e.Name, fmt.Sprintf("%04d-", i)) {
			t.Fatalf("List[%d] = %s, want sorted by name", i, e.Name)
		}
	}
}

func TestMkdirRenameChmodRemove(t *testing.T) {
	c, home := startServer(t, agent.Options{})
	ctx := ctxT(t, 20*time.Second)

	info, err := c.Mkdir(ctx, "x/y/z")
	if err != nil || info.Type != sandbox.FileDir || info.Mode != 0o755 || info.Owner != "nobody" {
		t.Fatalf("Mkdir(x/y/z) = %+v, %v", info, err)
	}
	if uid, _ := owner(t, filepath.Join(home, "x")); uid != nobody {
		t.Errorf("parent x belongs to %d, want the sandbox user", uid)
	}
	if _, err := c.Mkdir(ctx, "x/y/z"); err != nil {
		t.Errorf("Mkdir of an existing directory = %v, want nil (mkdir -p)", err)
	}
	if _, err := c.WriteFile(ctx, sandbox.WriteRequest{Path: "x/y/z/f.txt"}, strings.NewReader("content")); err != nil {
		t.Fatal(err)
	}

	info, err = c.Rename(ctx, "x/y/z/f.txt", "x/g.txt")
	if err != nil || info.Path != filepath.Join(home, "x/g.txt") || info.Size != 7 {
		t.Fatalf("Rename = %+v, %v", info, err)
	}
	if _, err := os.Stat(filepath.Join(home, "x/y/z/f.txt")); !os.IsNotExist(err) {
		t.Errorf("the source still exists after rename: %v", err)
	}
	if _, err := c.WriteFile(ctx, sandbox.WriteRequest{Path: "x/h.txt"}, strings.NewReader("other")); err != nil {
		t.Fatal(err)
	}
	if info, err := c.Rename(ctx, "x/h.txt", "x/g.txt"); err != nil || info.Size != 5 {
		t.Errorf("Rename over a file = %+v, %v; want it replaced", info, err)
	}

	info, err = c.Chmod(ctx, "x/g.txt", 0o750|fs.ModeSetgid)
	if err != nil || info.Mode != 0o750|fs.ModeSetgid {
		t.Errorf("Chmod = %+v, %v", info, err)
	}
	if fi, _ := os.Stat(filepath.Join(home, "x/g.txt")); fi.Mode()&(fs.ModePerm|fs.ModeSetgid) != 0o750|fs.ModeSetgid {
		t.Errorf("mode on disk = %v", fi.Mode())
	}

	if err := c.Remove(ctx, "x/g.txt", false); err != nil {
		t.Errorf("Remove(file) = %v", err)
	}
	if err := c.Remove(ctx, "x", true); err != nil {
		t.Errorf("Remove(x, recursive) = %v", err)
	}
	if _, err := os.Stat(filepath.Join(home, "x")); !os.IsNotExist(err) {
		t.Errorf("x still exists after a recursive remove: %v", err)
	}
	os.Mkdir(filepath.Join(home, "empty"), 0o755)
	if err := c.Remove(ctx, "empty", false); err != nil {
		t.Errorf("Remove(empty dir) = %v", err)
	}
}

// TestFilesAsUser: the file operations run with the sandbox user's ids,
// so they cannot do what the user could not do in a shell (here, as uid
// 1000 with root's files beside its own), and each refusal leaves the
// file system as it was; on the user's own files they work. Afterwards
// every thread of the agent is root again.
func TestFilesAsUser(t *testing.T) {
	needRoot(t)
	const user = 1000
	home := t.TempDir()
	os.Chmod(filepath.Dir(home), 0o711)
	os.Chown(home, user, user)
	c, _ := startServer(t, agent.Options{UID: user, GID: user, Home: home})
	rootDir := filepath.Join(home, "rootdir") // root's, 0755, in the user's home
	os.Mkdir(rootDir, 0o755)
	os.Chmod(rootDir, 0o755)
	for name, mode := range map[string]fs.FileMode{"file": 0o644, "prog": 0o755, "shadow": 0o600} {
		p := filepath.Join(rootDir, name)
		if err := os.WriteFile(p, []byte("root's "+name), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
	}
	ctx := ctxT(t, 30*time.Second)
	modeOf := func(p string) fs.FileMode {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode()
	}
	refused := []struct {
		name string
		err  error
	}{
		{"chmod a root file", second(c.Chmod(ctx, "rootdir/file", 0o777))},
		{"setuid on a root program", second(c.Chmod(ctx, "rootdir/prog", 0o755|fs.ModeSetuid))},
		{"chmod a root directory", second(c.Chmod(ctx, "rootdir", 0o777))},
		{"read a 0600 root file", c.ReadFile(ctx, "rootdir/shadow", io.Discard)},
		{"write into a root directory", second(c.WriteFile(ctx, sandbox.WriteRequest{Path: "rootdir/new"}, strings.NewReader("x")))},
		{"overwrite a root file in a root directory", second(c.WriteFile(ctx, sandbox.WriteRequest{Path: "rootdir/file"}, strings.NewReader("x")))},
		{"mkdir in a root directory", second(c.Mkdir(ctx, "rootdir/sub"))},
		{"remove from a root directory", c.Remove(ctx, "rootdir/file", false)},
		{"rename out of a root directory", second(c.Rename(ctx, "rootdir/file", "mine"))},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) { wantCode(t, tc.err, sandbox.CodePermissionDenied) })
	}
	for name, mode := range map[string]fs.FileMode{"file": 0o644, "prog": 0o755, "shadow": 0o600} {
		p := filepath.Join(rootDir, name)
		if got := modeOf(p); got != mode {
			t.Errorf("%s has mode %v after the refusals, want %v", name, got, mode)
		}
		if uid, _ := owner(t, p); uid != 0 {
			t.Errorf("%s belongs to %d after the refusals, want root", name, uid)
		}
	}
	if got := modeOf(rootDir); got != fs.ModeDir|0o755 {
		t.Errorf("rootdir has mode %v after the refusals, want drwxr-xr-x", got)
	}
	for _, p := range []string{"rootdir/new", "rootdir/sub", "mine"} {
		if _, err := os.Lstat(filepath.Join(home, p)); !os.IsNotExist(err) {
			t.Errorf("%s exists after a refused operation: %v", p, err)
		}
	}
	if left := tempFiles(t, rootDir); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}

	t.Run("the user's own files", func(t *testing.T) {
		if _, err := c.WriteFile(ctx, sandbox.WriteRequest{Path: "own/tool", Parents: true, Mode: 0o755}, strings.NewReader("#!/bin/sh\n")); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"own", "own/tool"} {
			if uid, gid := owner(t, filepath.Join(home, p)); uid != user || gid != user {
				t.Errorf("%s belongs to %d:%d, want %d:%d", p, uid, gid, user, user)
			}
		}
		if info, err := c.Chmod(ctx, "own/tool", 0o755|fs.ModeSetuid); err != nil || info.Mode != 0o755|fs.ModeSetuid {
			t.Errorf("setuid on the user's own file = %+v, %v", info, err)
		}
		var got bytes.Buffer
		if err := c.ReadFile(ctx, "own/tool", &got); err != nil || got.String() != "#!/bin/sh\n" {
			t.Errorf("ReadFile(own/tool) = %q, %v", got.String(), err)
		}
		if _, err := c.Rename(ctx, "own/tool", "own/tool2"); err != nil {
			t.Errorf("Rename = %v", err)
		}
		if err := c.Remove(ctx, "own", true); err != nil {
			t.Errorf("Remove = %v", err)
		}
		if err := c.ReadFile(ctx, "rootdir/file", io.Discard); err != nil {
			t.Errorf("ReadFile of a world-readable root file = %v", err)
		}
	})
	t.Run("a write waiting for its content holds no switched thread", func(t *testing.T) {
		release := make(chan struct{})
		r := &stallingReader{data: []byte("part"), stalled: make(chan struct{}), release: release}
		done := make(chan error, 1)
		go func() {
			_, err := c.WriteFile(ctx, sandbox.WriteRequest{Path: "slow"}, r)
			done <- err
		}()
		<-r.stalled
		waitFor(t, 5*time.Second, "no temporary file appeared", func() bool { return len(tempFiles(t, home)) == 1 })
		wantAllRoot(t)
		close(release)
		<-done
	})
	wantAllRoot(t)
}

// TestReadSocket: a read of a socket is invalid_argument naming what the
// path is, not internal.
func TestReadSocket(t *testing.T) {
	c, home := startServer(t, agent.Options{})
	ln, err := net.Listen("unix", filepath.Join(home, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = c.ReadFile(ctxT(t, 10*time.Second), "s.sock", io.Discard)
	wantCode(t, err, sandbox.CodeInvalidArgument)
	if msg := sandbox.AsError(err).Message; !strings.Contains(msg, "is a socket") {
		t.Errorf("message = %q, want it to say the path is a socket", msg)
	}
}

// wantAllRoot fails t unless every thread of this process has root's
// real, effective, saved and file system ids within a few seconds: an
// operation's thread switches back after its answer has gone out.
func wantAllRoot(t *testing.T) {
	t.Helper()
	var switched []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		tasks, err := filepath.Glob("/proc/self/task/*/status")
		if err != nil || len(tasks) == 0 {
			t.Fatalf("threads: %v, %v", tasks, err)
		}
		switched = nil
		for _, st := range tasks {
			b, err := os.ReadFile(st)
			if err != nil {
				continue // the thread ended
			}
			for line := range strings.Lines(string(b)) {
				if k, v, _ := strings.Cut(line, ":"); (k == "Uid" || k == "Gid") && strings.Join(strings.Fields(v), " ") != "0 0 0 0" {
					switched = append(switched, fmt.Sprintf("%s %s %q", st, k, strings.TrimSpace(v)))
				}
			}
		}
		if len(switched) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, s := range switched {
		t.Errorf("thread %s, want root's", s)
	}
}

// TestListBounded: a listing the daemon takes from an agent is bounded,
// whatever the agent sends: a fake agent that answers a list with data
// frames for ever gets too_large once MaxListBytes have come, and the
// client reads no further.
func TestListBounded(t *testing.T) {
	sent := make(chan int, 1)
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) {
		client, fake := net.Pipe()
		go func() {
			defer fake.Close()
			if _, _, err := agent.ReadFrame(fake, nil); err != nil {
				sent <- 0
				return
			}
			entry := fmt.Sprintf(`{"name":%q}`, strings.Repeat("n", 1000))
			frame := []byte("[" + strings.Repeat(entry+",", 1000) + entry + "]")
			n := 0
			for agent.WriteFrame(fake, agent.FrameData, frame) == nil {
				n += len(frame)
			}
			sent <- n
		}()
		return client, nil
	})
	_, err := c.List(ctxT(t, time.Minute), "huge")
	wantCode(t, err, sandbox.CodeTooLarge)
	if n := <-sent; n > agent.MaxListBytes+2*agent.MaxFrame {
		t.Errorf("the client read %d bytes of a listing; want it to stop after %d", n, agent.MaxListBytes)
	}
}
