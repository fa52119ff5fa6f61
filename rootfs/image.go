// Package rootfs builds hearth's default sandbox root filesystem, a Debian
// minbase with python3, the tools agents reach for first (git, curl, ps,
// unzip, less, file, jq) and a sandbox user, and imports a root filesystem
// into a layers.Store as the committed snapshot sandboxes are prepared from.
//
// Build is slow (debootstrap: about a minute, for 290 MB) and runs once per
// recipe: the result stays in Options.Dir, marked complete by a file
// written last. Import is a copy into a snapshot and runs once per store.
package rootfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/internal/mountinfo"
	"github.com/hearth/hearth/layers"
)

// Defaults for Options.
const (
	DefaultSuite  = "bookworm"
	DefaultMirror = "http://deb.debian.org/debian"
)

// include is the Debian packages Debootstrap adds to minbase: python3 and
// the certificates for TLS, and the tools agents reach for first: git,
// curl, ps and top (procps), unzip, less, file and jq. Their dependencies
// come along; their recommendations do not.
const include = "python3,ca-certificates,git,curl,procps,unzip,less,file,jq"

// recipe is the part of the marker that is about this code: bump it when
// the root filesystem Build makes changes, and every host rebuilds.
const recipe = "hearth-image/4 minbase include=" + include + " locale-archive"

// Layout of Options.Dir.
const (
	rootfsName = "rootfs"    // the finished root filesystem
	markerName = ".complete" // the version of rootfs, written last
	lockName   = ".lock"     // flock'ed by the Build in progress
	tmpName    = ".tmp-rootfs"
	oldName    = ".old-rootfs"
)

// ErrNoDebootstrap is returned by Build when it must bootstrap and the
// debootstrap command is missing.
var ErrNoDebootstrap = errors.New("image: debootstrap not found (apt-get install debootstrap)")

// Bootstrapper fills the empty directory rootfs with a root filesystem for
// suite from mirror, writing human-readable progress lines to progress.
// Build customizes the result afterwards.
type Bootstrapper func(ctx context.Context, rootfs, suite, mirror string, progress io.Writer) error

// Options configures Build. Only Dir is required.
type Options struct {
	// Dir holds the image: Dir/rootfs, its marker and a lock file.
	Dir string
	// Suite is the Debian release (default DefaultSuite). Changing it
	// rebuilds the image.
	Suite string
	// Mirror is the Debian mirror (default DefaultMirror).
	Mirror string
	// Progress receives the bootstrap's progress, one line at a time,
	// each prefixed "image: "; nil discards it.
	Progress io.Writer
	// Logger receives build events; nil discards them.
	Logger *slog.Logger
	// Bootstrap makes the bare root filesystem; nil runs Debootstrap.
	// Tests inject a fake.
	Bootstrap Bootstrapper
}

// Version is the marker Build writes for opts: the recipe and the suite.
// The mirror is not part of it: any mirror gives the same image.
func Version(opts Options) string {
	suite := opts.Suite
	if suite == "" {
		suite = DefaultSuite
	}
	return recipe + " suite=" + suite
}

// Build makes the default root filesystem in opts.Dir unless it is there
// already, and returns its path (Dir/rootfs).
//
// The image is reused when its marker holds Version(opts); otherwise it is
// bootstrapped into a temporary directory, customized (see customize), and
// swapped in, and the marker is written last, so a build that is killed
// half-way leaves no marker and is redone from scratch by the next Build.
// A lock file serializes builds of one Dir across processes: a second
// Build waits for the first and then reuses its result. Build returns
// ctx's error if ctx ends while it waits or builds, and ErrNoDebootstrap
// if debootstrap is needed and missing.
func Build(ctx context.Context, opts Options) (string, error) {
	if opts.Dir == "" {
		return "", errors.New("image: Options.Dir is empty")
	}
	if opts.Suite == "" {
		opts.Suite = DefaultSuite
	}
	if opts.Mirror == "" {
		opts.Mirror = DefaultMirror
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("image", opts.Dir)
	bootstrap := opts.Bootstrap
	if bootstrap == nil {
		bootstrap = Debootstrap
	}
	progress := newPrefixWriter(opts.Progress, "image: ")
	defer progress.Flush()

	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return "", fmt.Errorf("image: %w", err)
	}
	unlock, err := lock(ctx, filepath.Join(opts.Dir, lockName), func() {
		log.Info("image: waiting for another build of this image")
		fmt.Fprintln(progress, "waiting for another build of this image")
	})
	if err != nil {
		return "", err
	}
	defer unlock()

	rootfs := filepath.Join(opts.Dir, rootfsName)
	version := Version(opts)
	if current(opts.Dir) == version {
		return rootfs, nil
	}
	start := time.Now()
	log.Info("image: building", "version", version, "mirror", opts.Mirror)
	if err := build(ctx, opts, bootstrap, progress, log); err != nil {
		return "", err
	}
	if err := writeMarker(opts.Dir, version); err != nil {
		return "", fmt.Errorf("image: %w", err)
	}
	log.Info("image: built", "version", version, "elapsed", time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(progress, "built in %s\n", time.Since(start).Round(time.Second))
	return rootfs, nil
}

// build makes the image in opts.Dir/rootfs afresh, with bootstrap, then
// customizes it: in a temporary directory swapped in at the end, the
// version marker removed first, so that a crash from then on rebuilds.
// The caller holds the build lock and writes the new marker.
func build(ctx context.Context, opts Options, bootstrap Bootstrapper, progress io.Writer, log *slog.Logger) error {
	rootfs := filepath.Join(opts.Dir, rootfsName)
	// Leftovers of a build that was killed: ours now, as we hold the lock.
	tmp := filepath.Join(opts.Dir, tmpName)
	old := filepath.Join(opts.Dir, oldName)
	for _, p := range []string{tmp, old} {
		if err := removeAll(p); err != nil {
			return fmt.Errorf("image: removing leftover %s: %w", p, err)
		}
	}
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if err := bootstrap(ctx, tmp, opts.Suite, opts.Mirror, progress); err != nil {
		removeAll(tmp)
		return fmt.Errorf("image: bootstrap %s: %w", opts.Suite, err)
	}
	if err := ctx.Err(); err != nil {
		removeAll(tmp)
		return err
	}
	fmt.Fprintln(progress, "customizing")
	if err := customize(tmp); err != nil {
		removeAll(tmp)
		return fmt.Errorf("image: customize: %w", err)
	}
	if err := archiveLocales(ctx, tmp); err != nil {
		removeAll(tmp)
		return fmt.Errorf("image: %w", err)
	}
	// Swap: the marker goes first, so a crash from here on rebuilds.
	if err := os.Remove(filepath.Join(opts.Dir, markerName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("image: %w", err)
	}
	if err := os.Rename(rootfs, old); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("image: %w", err)
	}
	if err := os.Rename(tmp, rootfs); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if err := removeAll(old); err != nil {
		log.Warn("image: removing the previous image", "err", err)
	}
	return nil
}

// current returns the version in dir's marker, or "" if there is none or
// the root filesystem is missing.
func current(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, markerName))
	if err != nil {
		return ""
	}
	if fi, err := os.Stat(filepath.Join(dir, rootfsName)); err != nil || !fi.IsDir() {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// writeMarker writes the marker durably: the root filesystem it vouches
// for is synced first, then the marker is written, synced and renamed.
func writeMarker(dir, version string) error {
	if err := layers.Syncfs(filepath.Join(dir, rootfsName)); err != nil {
		return err
	}
	tmp := filepath.Join(dir, markerName+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.WriteString(version + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, markerName))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return layers.Syncfs(dir)
}

// lock takes an exclusive flock on path, waiting (and calling waiting
// once) while another process or Build holds it, until ctx ends.
func lock(ctx context.Context, path string, waiting func()) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	for told := false; ; {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("image: lock %s: %w", path, err)
		}
		if !told {
			waiting()
			told = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Debootstrap is the default Bootstrapper: debootstrap --variant=minbase
// with the packages of include. Its output goes to progress. When ctx
// ends, debootstrap gets SIGTERM (so that it unmounts what it mounted in
// rootfs) and, 30 s later, SIGKILL.
func Debootstrap(ctx context.Context, rootfs, suite, mirror string, progress io.Writer) error {
	bin, err := exec.LookPath("debootstrap")
	if err != nil {
		return ErrNoDebootstrap
	}
	cmd := exec.CommandContext(ctx, bin,
		"--variant=minbase", "--include="+include, "--components=main",
		suite, rootfs, mirror)
	cmd.Stdout = progress
	cmd.Stderr = progress
	cmd.Env = append(os.Environ(), "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive")
	// Its own process group, so that the dpkg and chroot children are
	// signalled too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("debootstrap: %w (the log is in %s/debootstrap/debootstrap.log)", err, rootfs)
	}
	return nil
}

// removeAll removes path like os.RemoveAll, after unmounting whatever is
// mounted below it: a killed debootstrap can leave /proc, /sys and even
// bind mounts of the host's /dev nodes in its target, which a plain
// recursive removal would descend into.
func removeAll(path string) error {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	mounts, err := mountinfo.Under(abs)
	if err != nil {
		return err
	}
	for _, m := range mounts { // deepest first
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return &os.PathError{Op: "umount", Path: m, Err: err}
		}
	}
	if mounts, _ := mountinfo.Under(abs); len(mounts) > 0 {
		return fmt.Errorf("still mounted under %s: %v", abs, mounts)
	}
	return os.RemoveAll(abs)
}
