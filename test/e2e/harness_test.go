package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"github.com/hearth/hearth/internal/testenv"
	"io"
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
	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/driver/oci"
)

// bins holds the hearth and hearth-agent binaries built once for the package.
var bins struct {
	once       sync.Once
	dir        string
	hearth     string
	err        error
	runtimes   []string
	imageCache string
}

// TestMain builds the binaries once; every test that needs a daemon skips
// with the reason when this machine cannot run one.
func TestMain(m *testing.M) {
	code := m.Run()
	if bins.dir != "" {
		os.RemoveAll(bins.dir)
	}
	os.Exit(code)
}

// requireDaemon skips unless this host can run hearth (root, a runtime,
// the image cache) and returns the path of the hearth binary.
func requireDaemon(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "end-to-end tests need root (mounts, cgroups, runtimes); run ./scripts/test.sh")
	}
	bins.once.Do(func() {
		bins.dir, bins.err = os.MkdirTemp("", "hearth-e2e-bin")
		if bins.err != nil {
			return
		}
		for _, b := range []string{"hearth", "hearth-agent"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(bins.dir, b), "github.com/hearth/hearth/cmd/"+b)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				bins.err = fmt.Errorf("build %s: %v\n%s", b, err, out)
				return
			}
		}
		bins.hearth = filepath.Join(bins.dir, "hearth")
		for _, rt := range []string{"runc", "runsc", "crun"} {
			if _, err := exec.LookPath(rt); err == nil {
				bins.runtimes = append(bins.runtimes, rt)
			}
		}
		bins.imageCache = os.Getenv("HEARTH_IMAGE_CACHE")
		if bins.imageCache == "" {
			bins.imageCache = "/var/cache/hearth/images"
		}
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	if len(bins.runtimes) == 0 {
		testenv.Skip(t, "no OCI runtime (runsc, runc, crun) in PATH; ./scripts/install.sh installs them")
	}
	return bins.hearth
}

// forEachRuntime runs f as a subtest per installed runtime. crun is skipped
// where it refuses the host (hybrid cgroup v1), which its start reports.
func forEachRuntime(t *testing.T, f func(t *testing.T, runtime string)) {
	requireDaemon(t)
	for _, rt := range bins.runtimes {
		t.Run(rt, func(t *testing.T) { f(t, rt) })
	}
}

// daemon is one `hearth serve` process on a temporary data dir.
type daemon struct {
	t       testing.TB
	dataDir string
	runtime string
	args    []string // extra flags of hearth serve
	cmd     *exec.Cmd
	url     string
	token   string
	out     *testenv.Buffer
	// before holds the output of the daemon's earlier runs on this data
	// dir (a test that kills or stops it starts it again), logged with the
	// last run's when the test fails.
	before []string
	exited chan struct{}
}

// newDaemon starts hearth serve with its own data dir. Cleanup destroys
// every sandbox, stops the daemon and unmounts the layer store.
func newDaemon(t testing.TB, runtime string, serveArgs ...string) *daemon {
	t.Helper()
	requireDaemon(t)
	dir, err := os.MkdirTemp("", "hearth-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{t: t, dataDir: dir, runtime: runtime, args: serveArgs}
	d.start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if d.cmd != nil && d.running() {
			c := d.client()
			if list, err := c.List(ctx); err == nil {
				for _, sb := range list {
					c.Destroy(ctx, sb.Name)
				}
			}
			d.stop()
		}
		d.deleteLeftovers()
		if t.Failed() {
			for i, out := range d.before {
				t.Logf("daemon output, run %d:\n%s", i+1, out)
			}
			t.Logf("daemon output, run %d (the last):\n%s", len(d.before)+1, d.out.String())
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

// start runs the daemon and waits until it listens.
func (d *daemon) start() {
	d.t.Helper()
	if d.out != nil {
		d.before = append(d.before, d.out.String())
	}
	d.out = &testenv.Buffer{}
	args := []string{"serve", "--data-dir", d.dataDir, "--listen", "127.0.0.1:0",
		"--runtime", d.runtime, "--image-cache", bins.imageCache, "--layers-size", fmt.Sprint(8 << 30)}
	d.cmd = exec.Command(bins.hearth, append(args, d.args...)...)
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw := io.Pipe()
	d.cmd.Stdout = io.MultiWriter(d.out, pw)
	d.cmd.Stderr = d.out
	if err := d.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	d.exited = make(chan struct{})
	go func() {
		d.cmd.Wait()
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
	case d.url = <-urls:
	case <-d.exited:
		d.t.Fatalf("hearth serve exited before listening:\n%s", d.out.String())
	case <-time.After(10 * time.Minute): // the first start may build the image
		d.t.Fatalf("hearth serve did not listen within 10m:\n%s", d.out.String())
	}
	tok, err := os.ReadFile(filepath.Join(d.dataDir, "operator.token"))
	if err != nil {
		d.t.Fatal(err)
	}
	d.token = strings.TrimSpace(string(tok))
}

func (d *daemon) running() bool {
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

// deleteLeftovers deletes the runtime sandboxes a stopped daemon left,
// which cleanup's destroys do not reach: warm-pool members, listed to no
// one, outlive the daemon on purpose.
func (d *daemon) deleteLeftovers() {
	d.t.Helper()
	drv, err := oci.New(oci.Options{Runtime: d.runtime, StateDir: filepath.Join(d.dataDir, "oci", d.runtime)})
	if err != nil {
		d.t.Errorf("open the runtime to clean up: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	states, err := drv.Recover(ctx)
	if err != nil {
		d.t.Errorf("list leftover sandboxes: %v", err)
		return
	}
	for _, st := range states {
		if err := drv.Delete(ctx, st.ID); err != nil {
			d.t.Errorf("delete leftover sandbox %s: %v", st.ID, err)
		}
	}
}

// kill SIGKILLs the daemon, as a crash would.
func (d *daemon) kill() {
	d.t.Helper()
	d.cmd.Process.Kill()
	<-d.exited
}

// stop SIGTERMs the daemon and waits for it.
func (d *daemon) stop() {
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		d.cmd.Process.Kill()
		<-d.exited
	}
}

func (d *daemon) client() *client.Client { return client.New(d.url, d.token, nil) }

// cli runs the hearth CLI against the daemon with the operator token and
// returns stdout, stderr and the exit code.
func (d *daemon) cli(stdin string, args ...string) (string, string, int) {
	d.t.Helper()
	return d.cliAs(d.token, stdin, args...)
}

// cliAs is cli with another token.
func (d *daemon) cliAs(token, stdin string, args ...string) (string, string, int) {
	d.t.Helper()
	cmd := exec.Command(bins.hearth, args...)
	cmd.Env = append(os.Environ(), "HEARTH_URL="+d.url, "HEARTH_TOKEN="+token)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		d.t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
