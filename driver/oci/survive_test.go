package oci_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/driver/oci"
	"github.com/hearth/hearth/sandbox"
)

// daemonEnv marks the test binary re-executed as a stand-in daemon.
const daemonEnv = "HEARTH_OCI_TEST_DAEMON"

// TestSurvivesDaemonKill: a sandbox outlives the daemon that started it
// when that daemon is killed with SIGKILL together with its whole process
// group (as a terminal's ^C or a service manager would), and a driver built
// afterwards on the same state adopts it with Recover and reaches its agent.
func TestSurvivesDaemonKill(t *testing.T) {
	if os.Getenv(daemonEnv) != "" {
		standInDaemon(t)
		return
	}
	drivertest.RequireRoot(t)
	base := drivertest.BaseRootFS(t)
	agentPath := drivertest.BuildAgent(t)
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			bin := findRuntime(t, rt)
			dir := t.TempDir()
			t.Cleanup(func() { drivertest.UnmountUnder(t, dir) })
			root := drivertest.SnapshotRootFS(t, base)
			id := "survive" + rt

			cmd := exec.Command(os.Args[0], "-test.run=^TestSurvivesDaemonKill$")
			cmd.Env = append(os.Environ(),
				daemonEnv+"=1", "T_RUNTIME="+rt, "T_BINARY="+bin, "T_STATE="+dir,
				"T_ROOT="+root, "T_AGENT="+agentPath, "T_ID="+id)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			started := make(chan string, 1)
			go func() {
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					if line := sc.Text(); strings.HasPrefix(line, "STARTED") || strings.HasPrefix(line, "FAILED") {
						started <- line
						return
					}
				}
				started <- "EOF"
			}()
			select {
			case line := <-started:
				if line != "STARTED" {
					syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
					cmd.Wait()
					t.Fatalf("stand-in daemon: %s", line)
				}
			case <-time.After(time.Minute):
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				cmd.Wait()
				t.Fatal("stand-in daemon did not start the sandbox within a minute")
			}
			if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			cmd.Wait()

			d := newDriver(t, rt, bin, dir)
			t.Cleanup(func() {
				if err := d.Delete(context.Background(), id); err != nil && !errors.Is(err, driver.ErrNotFound) {
					t.Errorf("Delete(%s) = %v", id, err)
				}
			})
			states, err := d.Recover(t.Context())
			if err != nil || len(states) != 1 || states[0].ID != id || states[0].Status != driver.StatusRunning {
				t.Fatalf("Recover() after the daemon's death = %+v, %v; want %s running", states, err, id)
			}
			// Under runc and crun the running sandbox keeps its user
			// namespace range, which its own runtime root vouches for: a
			// range released here would be given to the next sandbox too.
			if rt != oci.RuntimeRunsc && !slices.ContainsFunc(d.Leftovers(id), func(s string) bool { return strings.HasPrefix(s, "user namespace range claim") }) {
				t.Errorf("after Recover sandbox %s, running, holds no user namespace range claim: %q", id, d.Leftovers(id))
			}
			began := time.Now()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.Dial(ctx, id) })
			if _, err := c.Ping(ctx); err != nil {
				t.Fatalf("Ping() after the daemon's death = %v", err)
			}
			t.Logf("reconnected in %v", time.Since(began).Round(time.Microsecond))
		})
	}
}

// standInDaemon starts one sandbox as the environment says, prints
// STARTED, and waits to be killed.
func standInDaemon(t *testing.T) {
	d, err := oci.New(oci.Options{
		Runtime:  os.Getenv("T_RUNTIME"),
		Binary:   os.Getenv("T_BINARY"),
		StateDir: os.Getenv("T_STATE"),
	})
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err = d.Start(ctx, driver.Spec{
			ID:        os.Getenv("T_ID"),
			RootFS:    os.Getenv("T_ROOT"),
			AgentPath: os.Getenv("T_AGENT"),
			UID:       1000, GID: 1000, Home: "/home/sandbox",
			Resources: sandbox.Sizes()[sandbox.DefaultSize],
		})
	}
	if err != nil {
		fmt.Println("FAILED", strings.ReplaceAll(err.Error(), "\n", " | "))
		return
	}
	fmt.Println("STARTED")
	time.Sleep(5 * time.Minute)
}
