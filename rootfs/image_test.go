package rootfs_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/hearth/hearth/testutil/testenv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hearth/hearth/rootfs"
)

// fakeBootstrap writes a tiny Debian-like tree and counts its calls.
type fakeBootstrap struct {
	calls atomic.Int32
	delay time.Duration
	fail  error // returned after writing half the tree
}

func (f *fakeBootstrap) run(ctx context.Context, rootDir, suite, mirror string, progress io.Writer) error {
	f.calls.Add(1)
	fmt.Fprintf(progress, "I: Retrieving %s from %s\nI: Validating", suite, mirror)
	fmt.Fprintf(progress, " Packages\r\n")
	files := map[string]string{
		"etc/passwd":                       "root:x:0:0:root:/root:/bin/bash\n",
		"etc/group":                        "root:x:0:\n",
		"etc/shadow":                       "root:*:19000:0:99999:7:::\n",
		"etc/gshadow":                      "root:*::\n",
		"etc/skel/.bashrc":                 "# bashrc\n",
		"etc/machine-id":                   "0123456789abcdef\n",
		"etc/resolv.conf":                  "nameserver 10.0.0.1\n",
		"bin/bash":                         "#!fake\n",
		"var/lib/apt/lists/deb_Packages":   "Package: x\n",
		"var/cache/apt/pkgcache.bin":       "cache",
		"var/cache/apt/archives/x.deb":     "deb",
		"var/log/bootstrap.log":            "log",
		"usr/share/doc/python3/copyright":  "kept",
		"var/lib/apt/lists/partial/.keep":  "",
		"var/cache/apt/archives/lock":      "",
		"var/cache/apt/archives/partial/x": "",
	}
	i := 0
	for name, content := range files {
		if f.fail != nil && i == len(files)/2 {
			return f.fail
		}
		i++
		p := filepath.Join(rootDir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	select {
	case <-time.After(f.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root: the image's home is chowned to 1000")
	}
}

func TestBuild(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	fake := &fakeBootstrap{}
	var progress strings.Builder
	opts := rootfs.Options{Dir: dir, Bootstrap: fake.run, Progress: &progress}
	rootDir, err := rootfs.Build(ctx, opts)
	if err != nil {
		t.Fatalf("Build = %v", err)
	}
	if want := filepath.Join(dir, "rootfs"); rootDir != want {
		t.Errorf("Build = %s, want %s", rootDir, want)
	}
	checkImage(t, rootDir)
	if got, err := os.ReadFile(filepath.Join(rootDir, "etc/machine-id")); err != nil || len(got) != 0 {
		t.Errorf("machine-id = %q, %v, want empty", got, err)
	}
	if got, _ := os.ReadFile(filepath.Join(rootDir, "home/sandbox/.bashrc")); string(got) != "# bashrc\n" {
		t.Errorf("home/sandbox/.bashrc = %q, want a copy of /etc/skel's", got)
	}
	if !exists(filepath.Join(rootDir, "usr/share/doc/python3/copyright")) {
		t.Error("customize removed a file it should keep")
	}
	marker, err := os.ReadFile(filepath.Join(dir, ".complete"))
	if err != nil || strings.TrimSpace(string(marker)) != rootfs.Version(opts) {
		t.Errorf("marker = %q, %v, want %q", marker, err, rootfs.Version(opts))
	}
	wantProgress := "image: I: Retrieving bookworm from http://deb.debian.org/debian\nimage: I: Validating Packages\nimage: customizing\n"
	if got := progress.String(); !strings.HasPrefix(got, wantProgress) || !strings.Contains(got, "image: built in ") {
		t.Errorf("progress = %q, want it to start %q and say built", got, wantProgress)
	}

	// Built once.
	if _, err := rootfs.Build(ctx, opts); err != nil {
		t.Fatal(err)
	}
	if n := fake.calls.Load(); n != 1 {
		t.Errorf("bootstrap ran %d times for two Builds, want 1", n)
	}
	// A new recipe or suite rebuilds.
	if err := os.WriteFile(filepath.Join(dir, ".complete"), []byte("hearth-image/0 old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := rootfs.Build(ctx, opts); err != nil {
		t.Fatal(err)
	}
	opts.Suite = "trixie"
	if _, err := rootfs.Build(ctx, opts); err != nil {
		t.Fatal(err)
	}
	if n := fake.calls.Load(); n != 3 {
		t.Errorf("bootstrap ran %d times, want 3 (after a version change and a suite change)", n)
	}
	checkNoLeftovers(t, dir)
}

func TestBuildInterrupted(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	boom := errors.New("boom")
	fake := &fakeBootstrap{fail: boom}
	opts := rootfs.Options{Dir: dir, Bootstrap: fake.run}
	if _, err := rootfs.Build(ctx, opts); !errors.Is(err, boom) {
		t.Fatalf("Build with a failing bootstrap = %v, want %v", err, boom)
	}
	if exists(filepath.Join(dir, "rootfs")) || exists(filepath.Join(dir, ".complete")) {
		t.Error("a failed Build left a rootfs or a marker")
	}
	checkNoLeftovers(t, dir)

	// A build killed half-way: a partial temporary tree, no marker.
	if err := os.MkdirAll(filepath.Join(dir, ".tmp-rootfs", "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	// And an old image whose marker is gone (killed during the swap).
	if err := os.MkdirAll(filepath.Join(dir, "rootfs", "stale"), 0o755); err != nil {
		t.Fatal(err)
	}
	fake.fail = nil
	rootDir, err := rootfs.Build(ctx, opts)
	if err != nil {
		t.Fatalf("Build after an interrupted one = %v", err)
	}
	checkImage(t, rootDir)
	if exists(filepath.Join(rootDir, "stale")) {
		t.Error("the rebuilt image kept the unmarked old one's files")
	}
	checkNoLeftovers(t, dir)
}

func TestBuildCancel(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithCancel(context.Background())
	dir := t.TempDir()
	fake := &fakeBootstrap{delay: time.Hour}
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	if _, err := rootfs.Build(ctx, rootfs.Options{Dir: dir, Bootstrap: fake.run}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Build = %v, want context.Canceled", err)
	}
	checkNoLeftovers(t, dir)
	if exists(filepath.Join(dir, "rootfs")) {
		t.Error("a cancelled Build left a rootfs")
	}
}

// TestBuildConcurrent: the second Build waits for the first and reuses it.
func TestBuildConcurrent(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	fake := &fakeBootstrap{delay: 300 * time.Millisecond}
	var wg sync.WaitGroup
	var progress [4]strings.Builder
	for i := range progress {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := rootfs.Build(ctx, rootfs.Options{Dir: dir, Bootstrap: fake.run, Progress: &progress[i]}); err != nil {
				t.Errorf("Build = %v", err)
			}
		}()
	}
	wg.Wait()
	if n := fake.calls.Load(); n != 1 {
		t.Errorf("bootstrap ran %d times for 4 concurrent Builds, want 1", n)
	}
	waited := 0
	for i := range progress {
		if strings.Contains(progress[i].String(), "waiting for another build") {
			waited++
		}
	}
	if waited != len(progress)-1 {
		t.Errorf("%d Builds said they were waiting, want %d", waited, len(progress)-1)
	}
}

// TestBuildWaitCancel: a Build waiting for the lock gives up with ctx.
func TestBuildWaitCancel(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	fake := &fakeBootstrap{}
	if _, err := rootfs.Build(ctx, rootfs.Options{Dir: dir, Bootstrap: fake.run}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Build while locked = %v, want context.DeadlineExceeded", err)
	}
	if fake.calls.Load() != 0 {
		t.Error("Build bootstrapped without the lock")
	}
}

func TestBuildNoDir(t *testing.T) {
	if _, err := rootfs.Build(context.Background(), rootfs.Options{}); err == nil {
		t.Error("Build with no Dir succeeded")
	}
}

// checkImage checks what customize promises.
func checkImage(t *testing.T, root string) {
	t.Helper()
	for file, want := range map[string]string{
		"etc/passwd":  "sandbox:x:1000:1000:hearth sandbox:/home/sandbox:/bin/bash\n",
		"etc/group":   "sandbox:x:1000:\n",
		"etc/shadow":  "sandbox:*:",
		"etc/gshadow": "sandbox:!::\n",
	} {
		data, err := os.ReadFile(filepath.Join(root, file))
		if err != nil || !strings.Contains(string(data), want) {
			t.Errorf("%s = %q, %v, want a line %q", file, data, err, want)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(root, "home/sandbox"), &st); err != nil || st.Uid != 1000 || st.Gid != 1000 {
		t.Errorf("home/sandbox: uid %d gid %d, %v, want 1000:1000", st.Uid, st.Gid, err)
	}
	if des, err := os.ReadDir(filepath.Join(root, "run/hearth")); err != nil || len(des) != 0 {
		t.Errorf("run/hearth: %d entries, %v, want an empty directory", len(des), err)
	}
	// The agent's mount point is there, so that a start creates nothing.
	if des, err := os.ReadDir(filepath.Join(root, ".hearth")); err != nil || len(des) != 1 || des[0].Name() != "hearth-agent" {
		t.Errorf(".hearth: %v, %v, want only hearth-agent", des, err)
	}
	if fi, err := os.Lstat(filepath.Join(root, rootfs.AgentFile)); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("%s: %v, %v, want an empty regular file, mode 0755", rootfs.AgentFile, fi, err)
	}
	for file, want := range map[string]string{"etc/hostname": "sandbox\n", "etc/hosts": "127.0.0.1\tlocalhost\n"} {
		if data, err := os.ReadFile(filepath.Join(root, file)); err != nil || !strings.HasPrefix(string(data), want) {
			t.Errorf("%s = %q, %v, want it to start %q", file, data, err, want)
		}
	}
	if fi, err := os.Lstat(filepath.Join(root, "etc/resolv.conf")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("etc/resolv.conf: %v, %v, want a regular file", fi, err)
	} else if data, _ := os.ReadFile(filepath.Join(root, "etc/resolv.conf")); !strings.Contains(string(data), "nameserver") {
		t.Errorf("etc/resolv.conf = %q, want a nameserver", data)
	}
	for _, d := range []string{"var/lib/apt/lists", "var/cache/apt"} {
		filepath.WalkDir(filepath.Join(root, d), func(p string, de fs.DirEntry, err error) error {
			if err == nil && !de.IsDir() {
				t.Errorf("%s left in the image", p)
			}
			return nil
		})
	}
}

func checkNoLeftovers(t *testing.T, dir string) {
	t.Helper()
	for _, name := range []string{".tmp-rootfs", ".old-rootfs", ".complete.tmp"} {
		if exists(filepath.Join(dir, name)) {
			t.Errorf("%s left in %s", name, dir)
		}
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
