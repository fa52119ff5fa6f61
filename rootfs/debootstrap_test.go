package rootfs_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/layers/btrfs"
	"github.com/hearth/hearth/rootfs"
	"github.com/hearth/hearth/testutil/testenv"
)

// TestDebootstrap builds the real image (about 75 s, network to the Debian
// mirror) and imports it into a btrfs store. It runs only with
// HEARTH_TEST_DEBOOTSTRAP=1; HEARTH_TEST_IMAGE_DIR, if set, keeps the image
// there between runs instead of in a temporary directory.
func TestDebootstrap(t *testing.T) {
	if os.Getenv("HEARTH_TEST_DEBOOTSTRAP") != "1" {
		t.Skip("set HEARTH_TEST_DEBOOTSTRAP=1 to bootstrap a real image (75 s, needs the Debian mirror)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ctx := context.Background()
	dir := os.Getenv("HEARTH_TEST_IMAGE_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	var progress testenv.Buffer
	start := time.Now()
	rootDir, err := rootfs.Build(ctx, rootfs.Options{Dir: dir, Progress: &progress})
	t.Logf("Build: %s", time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("Build = %v\n%s", err, progress.String())
	}
	if out := progress.String(); out != "" && !strings.HasPrefix(out, "image: ") {
		t.Errorf("progress does not start with %q: %.200s", "image: ", out)
	}
	t.Logf("progress: %d lines, last: %s", strings.Count(progress.String(), "\n"), lastLine(progress.String()))
	out, err := exec.Command("du", "-sh", rootDir).CombinedOutput()
	t.Logf("du -sh: %s %v", bytes.TrimSpace(out), err)
	checkImage(t, rootDir)
	for _, cmd := range [][]string{
		{"/usr/bin/python3", "-c", "import ssl, json; print(ssl.OPENSSL_VERSION)"},
		{"/bin/sh", "-c", "id sandbox && ls -ld /home/sandbox"},
		// The tools agents reach for first.
		{"/usr/bin/git", "--version"},
		{"/usr/bin/curl", "--version"},
		{"/usr/bin/jq", "--version"},
		{"/usr/bin/unzip", "-v"},
		{"/usr/bin/less", "--version"},
		{"/usr/bin/file", "/bin/sh"},
	} {
		out, err := exec.Command("chroot", append([]string{rootDir}, cmd...)...).CombinedOutput()
		if err != nil {
			t.Errorf("chroot %v: %v: %s", cmd, err, out)
		}
		t.Logf("chroot %v: %s", cmd, firstLine(string(out)))
	}
	// ps reads /proc, which a bare chroot lacks: it gets one of its own,
	// in a mount namespace of its own.
	ps := exec.Command("unshare", "--mount", "--propagation", "private", "chroot", rootDir,
		"/bin/sh", "-c", "mount -t proc proc /proc && ps -o comm= -p $$")
	if out, err := ps.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "sh" {
		t.Errorf("ps -o comm= -p $$ = %q, %v; want sh", out, err)
	}
	// The compiled C.utf8 locale is in the locale archive.
	if out, err := exec.Command("chroot", rootDir, "/usr/bin/localedef", "--list-archive").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "C.utf8" {
		t.Errorf("localedef --list-archive = %q, %v; want C.utf8", out, err)
	}

	// A second Build reuses the image.
	start = time.Now()
	if _, err := rootfs.Build(ctx, rootfs.Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("second Build took %s, want a reuse", d)
	}

	if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		t.Skip("no mkfs.btrfs: not importing")
	}
	storeDir := filepath.Join(t.TempDir(), "layers")
	s, err := btrfs.Open(ctx, btrfs.Options{Dir: storeDir, ImageSize: 8 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Destroy(ctx); err != nil {
			t.Error(err)
		}
	})
	start = time.Now()
	if err := rootfs.Import(ctx, s, "default", rootDir); err != nil {
		t.Fatalf("Import = %v", err)
	}
	t.Logf("Import: %s", time.Since(start).Round(time.Millisecond))
	info, err := s.Stat(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	checkImage(t, info.Path)
	// Same contents (diff cannot compare device nodes: skip /dev) and
	// same metadata everywhere.
	if out, err := exec.Command("diff", "-r", "--no-dereference", "-x", "dev", rootDir, info.Path).CombinedOutput(); err != nil {
		t.Errorf("diff -r rootfs snapshot: %v: %.2000s", err, out)
	}
	if a, b := listing(t, rootDir), listing(t, info.Path); a != b {
		t.Errorf("metadata differs between rootfs and snapshot:\n%.2000s", lineDiff(a, b))
	}
	n, err := s.Usage(ctx, "default")
	t.Logf("Usage(default) = %d MB, %v", n>>20, err)
	start = time.Now()
	p, err := s.Prepare(ctx, "sb1", "default")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Prepare(sb1, default): %s", time.Since(start).Round(time.Microsecond))
	if out, err := exec.Command("chroot", p, "/usr/bin/python3", "-c", "print('hello from the snapshot')").CombinedOutput(); err != nil {
		t.Errorf("python3 in the snapshot: %v: %s", err, out)
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}

// listing is find's view of every file's type, mode, owner, size, link
// count, link target and modification time.
func listing(t *testing.T, root string) string {
	t.Helper()
	// Directories' sizes and link counts are the filesystem's own
	// (btrfs counts no links to a directory), so only files have them.
	cmd := exec.Command("sh", "-c", `find . -type d -printf '%p %y %m %U:%G %T@\n' -o -printf '%p %y %m %U:%G %T@ %s %n %l\n' | LC_ALL=C sort`)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("find in %s: %v", root, err)
	}
	return string(out)
}

func lineDiff(a, b string) string {
	in := map[string]bool{}
	for _, l := range strings.Split(b, "\n") {
		in[l] = true
	}
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if !in[l] {
			out = append(out, "only in rootfs: "+l)
		}
	}
	return strings.Join(out, "\n")
}
