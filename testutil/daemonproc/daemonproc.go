// Package daemonproc runs real `hearth serve` processes for the tests that
// drive hearth from outside: the end-to-end tests (test/e2e) and the attack
// suite (test/attack). It builds the hearth, hearth-kube and hearth-agent
// binaries once per test binary, as scripts/install.sh does, starts daemons on temporary data dirs, and cleans up
// after them: every sandbox destroyed, the daemon stopped, the runtime's
// leftovers deleted, its instance's network and cgroup parent torn down
// (each daemon is an instance of its own, see package instance), mounts
// under the data dir unmounted, the dir removed.
package daemonproc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/driver/oci"
	"github.com/hearth/hearth/internal/mountinfo"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/testenv"
)

// Binaries are what a test binary built once for all its daemons.
type Binaries struct {
	// Dir holds the binaries; Hearth and Agent are their paths. Hearth is
	// built without the Kubernetes libraries (the tag nokube), as
	// bin/hearth is, and hands a daemon in a cluster to the hearth-kube
	// beside it.
	Dir, Hearth, Agent string
	// Runtimes are the OCI runtimes found in PATH, in the order runc,
	// runsc, crun.
	Runtimes []string
	// ImageCache is the default image's cache (HEARTH_IMAGE_CACHE, or
	// /var/cache/hearth/images).
	ImageCache string
}

var bins struct {
	once sync.Once
	b    Binaries
	err  error
}

// Require skips t unless this host can run hearth (root, a runtime, the
// image cache), or fails it where HEARTH_TEST_STRICT is set, and returns
// the binaries, built on the first call.
func Require(t testing.TB) Binaries {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "these tests need root (mounts, cgroups, runtimes); run ./scripts/test.sh")
	}
	bins.once.Do(build)
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	if len(bins.b.Runtimes) == 0 {
		testenv.Skip(t, "no OCI runtime (runsc, runc, crun) in PATH; ./scripts/install.sh installs them")
	}
	return bins.b
}

// build builds the binaries into a temporary directory (see Cleanup).
func build() {
	b := &bins.b
	b.Dir, bins.err = os.MkdirTemp("", "hearth-test-bin")
	if bins.err != nil {
		return
	}
	for _, bin := range []struct{ name, pkg, tags string }{
		{"hearth", "hearth", "nokube"},
		{"hearth-kube", "hearth", ""},
		{"hearth-agent", "hearth-agent", ""},
	} {
		cmd := exec.Command("go", "build", "-tags="+bin.tags, "-o", filepath.Join(b.Dir, bin.name), "github.com/hearth/hearth/cmd/"+bin.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			bins.err = fmt.Errorf("build %s: %v\n%s", bin.name, err, out)
			return
		}
	}
	b.Hearth = filepath.Join(b.Dir, "hearth")
	b.Agent = filepath.Join(b.Dir, "hearth-agent")
	for _, rt := range []string{"runc", "runsc", "crun"} {
		if _, err := exec.LookPath(rt); err == nil {
			b.Runtimes = append(b.Runtimes, rt)
		}
	}
	b.ImageCache = os.Getenv("HEARTH_IMAGE_CACHE")
	if b.ImageCache == "" {
		b.ImageCache = "/var/cache/hearth/images"
	}
}

// Cleanup removes the binaries; a TestMain calls it after m.Run.
func Cleanup() {
	if bins.b.Dir != "" {
		os.RemoveAll(bins.b.Dir)
	}
}

// ForEachRuntime runs f as a subtest per installed runtime.
func ForEachRuntime(t *testing.T, f func(t *testing.T, runtime string)) {
	b := Require(t)
	for _, rt := range b.Runtimes {
		t.Run(rt, func(t *testing.T) { f(t, rt) })
	}
}

// Daemon is one `hearth serve` process on a temporary data dir.
type Daemon struct {
	T       testing.TB
	DataDir string
	Runtime string
	// Verb is the hearth verb it runs: serve or node.
	Verb string
	// Args are the extra flags of hearth serve.
	Args []string
	// URL is where the daemon listens; Token its operator token, from its
	// data dir's token file; when the daemon said its store holds the
	// operator token (HeldLine: a second daemon of a shared store writes
	// no file), the one the test gave it, kept across restarts ("" until
	// then).
	URL, Token string
	// Out is the output of the daemon's current run.
	Out *testenv.Buffer
	// Cmd is the current run's process.
	Cmd *exec.Cmd

	bins Binaries
	// before holds the output of the daemon's earlier runs on this data
	// dir (a test that kills or stops it starts it again), logged with the
	// last run's when the test fails.
	before []string
	exited chan struct{}
}

// New starts hearth serve with its own data dir. Cleanup destroys every
// sandbox, stops the daemon and unmounts the layer store.
func New(t testing.TB, runtime string, serveArgs ...string) *Daemon {
	t.Helper()
	return NewAs(t, "serve", runtime, serveArgs...)
}

// NewAs is New with the daemon's verb: "serve", or "node" for `hearth
// node` (whose args then name its cluster and store).
func NewAs(t testing.TB, verb, runtime string, serveArgs ...string) *Daemon {
	t.Helper()
	b := Require(t)
	dir, err := os.MkdirTemp("", "hearth-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{T: t, DataDir: dir, Runtime: runtime, Verb: verb, Args: serveArgs, bins: b}
	d.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if d.Cmd != nil && d.Running() {
			c := d.Client()
			if list, err := c.List(ctx); err == nil {
				for _, sb := range list {
					c.Destroy(ctx, sandbox.Ref(sb.Tenant, sb.Name)) // names are unique per tenant
				}
			}
			d.Stop()
		}
		d.DeleteLeftovers()
		d.TearDown()
		if t.Failed() {
			for i, out := range d.before {
				t.Logf("daemon output, run %d:\n%s", i+1, out)
			}
			t.Logf("daemon output, run %d (the last):\n%s", len(d.before)+1, d.Out.String())
		}
		// The layer store's loop mount and runsc's shared null netns stay
		// mounted for a daemon's next start; a test removes them.
		drivertest.UnmountUnder(t, dir)
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove the data dir: %v", err)
		}
	})
	return d
}

var listenRE = regexp.MustCompile(`listening on (http://\S+)`)

// HeldLine is what a daemon prints instead of its token file's name when
// its store holds a live operator token that it did not make (see
// lifecycle.ErrOperatorTokenHeld); it then writes no token file.
const HeldLine = "hearth: operator token held by the store: mint one with hearth token create --operator"

// Start runs the daemon and waits until it listens.
func (d *Daemon) Start() {
	d.T.Helper()
	if d.Out != nil {
		d.before = append(d.before, d.Out.String())
	}
	d.Out = &testenv.Buffer{}
	args := []string{d.Verb, "--data-dir", d.DataDir, "--listen", "127.0.0.1:0",
		"--runtime", d.Runtime, "--image-cache", d.bins.ImageCache, "--layers-size", fmt.Sprint(8 << 30)}
	d.Cmd = exec.Command(d.bins.Hearth, append(args, d.Args...)...)
	d.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw := io.Pipe()
	d.Cmd.Stdout = io.MultiWriter(d.Out, pw)
	d.Cmd.Stderr = d.Out
	if err := d.Cmd.Start(); err != nil {
		d.T.Fatal(err)
	}
	d.exited = make(chan struct{})
	go func() {
		d.Cmd.Wait()
		pw.Close()
		close(d.exited)
	}()
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
		io.Copy(io.Discard, pr)
	}()
	select {
	case d.URL = <-urls:
	case <-d.exited:
		d.T.Fatalf("hearth serve exited before listening:\n%s", d.Out.String())
	case <-time.After(10 * time.Minute): // the first start may build the image
		d.T.Fatalf("hearth serve did not listen within 10m:\n%s", d.Out.String())
	}
	d.Token = d.operatorToken()
}

// operatorToken reads the daemon's operator token file, which a daemon that
// printed HeldLine (before its listen line) does not have: its Token stays
// the one the test gave it then.
func (d *Daemon) operatorToken() string {
	d.T.Helper()
	tok, err := os.ReadFile(filepath.Join(d.DataDir, "operator.token"))
	if errors.Is(err, fs.ErrNotExist) && strings.Contains(d.Out.String(), HeldLine+"\n") {
		return d.Token
	}
	if err != nil {
		d.T.Fatal(err)
	}
	return strings.TrimSpace(string(tok))
}

// Running reports whether the daemon's current run has not exited.
func (d *Daemon) Running() bool {
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

// DeleteLeftovers deletes the runtime sandboxes a stopped daemon left,
// which cleanup's destroys do not reach: warm-pool members, listed to no
// one, outlive the daemon on purpose.
func (d *Daemon) DeleteLeftovers() {
	d.T.Helper()
	drv, states, err := d.runtimeStates()
	if err != nil {
		d.T.Errorf("clean up: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, st := range states {
		if err := drv.Delete(ctx, st.ID); err != nil {
			d.T.Errorf("delete leftover sandbox %s: %v", st.ID, err)
		}
	}
	// Every sandbox is gone: so must be every user namespace range
	// claimed for one, every mount but the driver's own directory, which
	// outlives a daemon on purpose and goes here.
	stateDir := filepath.Join(d.DataDir, "oci", d.Runtime)
	claims, _ := os.ReadDir(oci.DefaultIDClaimDir)
	for _, c := range claims {
		if b, err := os.ReadFile(filepath.Join(oci.DefaultIDClaimDir, c.Name())); err == nil && strings.HasPrefix(string(b), stateDir+"\n") {
			d.T.Errorf("a user namespace range is still claimed for a sandbox of this daemon: %s: %q", c.Name(), b)
		}
	}
	if under, _ := mountinfo.Under(filepath.Join(drv.MountDir(), "roots")); len(under) > 0 {
		d.T.Errorf("roots still mounted in %s: %v", drv.MountDir(), under)
	}
	drivertest.UnmountUnder(d.T, drv.MountDir())
	os.Remove(drv.MountDir())
}

// RuntimeSandboxes lists the ids of the sandboxes the daemon's runtime
// holds in its state dir, running or not: after every sandbox was
// destroyed, none, warm-pool members aside.
func (d *Daemon) RuntimeSandboxes() ([]string, error) {
	_, states, err := d.runtimeStates()
	ids := make([]string, 0, len(states))
	for _, st := range states {
		ids = append(ids, st.ID)
	}
	return ids, err
}

// runtimeStates opens the daemon's runtime driver and recovers its
// sandboxes' states.
func (d *Daemon) runtimeStates() (*oci.Driver, []driver.State, error) {
	names, err := d.Names()
	if err != nil {
		return nil, nil, err
	}
	drv, err := oci.New(oci.Options{Runtime: d.Runtime, StateDir: filepath.Join(d.DataDir, "oci", d.Runtime), CgroupParent: names.CgroupParent})
	if err != nil {
		return nil, nil, fmt.Errorf("open the runtime: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	states, err := drv.Recover(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("list the runtime's sandboxes: %w", err)
	}
	return drv, states, nil
}

// Kill SIGKILLs the daemon, as a crash would.
func (d *Daemon) Kill() {
	d.T.Helper()
	d.Cmd.Process.Kill()
	<-d.exited
}

// Stop SIGTERMs the daemon and waits for it.
func (d *Daemon) Stop() {
	d.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		d.Cmd.Process.Kill()
		<-d.exited
	}
}

// Client is a Go client with the operator token.
func (d *Daemon) Client() *client.Client { return client.New(d.URL, d.Token, nil) }

// CLI runs the hearth CLI against the daemon with the operator token and
// returns stdout, stderr and the exit code.
func (d *Daemon) CLI(stdin string, args ...string) (string, string, int) {
	d.T.Helper()
	return d.CLIAs(d.Token, stdin, args...)
}

// CLIAs is CLI with another token.
func (d *Daemon) CLIAs(token, stdin string, args ...string) (string, string, int) {
	d.T.Helper()
	cmd := exec.Command(d.bins.Hearth, args...)
	cmd.Env = append(os.Environ(), "HEARTH_URL="+d.URL, "HEARTH_TOKEN="+token)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		d.T.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

// MemoryImage returns the directory of memory image key (a checkpoint's
// id) once it is sealed: runsc's driver seals an image in the background
// after the checkpoint call returns (its directory appears whole, by a
// rename, and its taken marker goes). It fails the test after 30 s.
func (d *Daemon) MemoryImage(key string) string {
	d.T.Helper()
	memory := filepath.Join(d.DataDir, "oci", d.Runtime, "memory")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, dirErr := os.Stat(filepath.Join(memory, key))
		_, markerErr := os.Stat(filepath.Join(memory, key+".taken"))
		if dirErr == nil && os.IsNotExist(markerErr) {
			return filepath.Join(memory, key)
		}
		if time.Now().After(deadline) {
			d.T.Fatalf("memory image %s is not sealed after 30 s (%v, marker %v)", key, dirErr, markerErr)
		}
	}
}
