//go:build unix

package sqlite_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
	"github.com/hearth/hearth/store/sqlite"
)

// The crash tests re-run this test binary as a child that writes through a
// DB and dies by SIGKILL: no Close, no deferred function, no checkpoint. The
// child says "ack N" on stdout after each call returns; whatever it acked
// must be in the file when the parent opens it.
const (
	crashEnvDB   = "HEARTH_STORE_CRASH_DB"   // the child's database path
	crashEnvMode = "HEARTH_STORE_CRASH_MODE" // "once" or "stream"
)

func TestCrashSafety(t *testing.T) {
	if path := os.Getenv(crashEnvDB); path != "" {
		crashChild(t, path, os.Getenv(crashEnvMode))
		return
	}

	t.Run("KilledRightAfterReturn", func(t *testing.T) {
		path := tempPath(t)
		acks, out := runCrashChild(t, path, "once", 0)
		if len(acks) != 3 {
			t.Fatalf("child acked %d calls, want 3; output:\n%s", len(acks), out)
		}
		db := open(t, path)
		ctx := t.Context()
		sb, err := db.Sandboxes().Get(ctx, "", "survivor")
		if err != nil {
			t.Fatalf("Sandboxes.Get(survivor) after SIGKILL = %v, want the row", err)
		}
		if sb.Status != sandbox.StatusRunning || sb.Reason != "started" {
			t.Errorf("sandbox after SIGKILL = %s/%s, want the acknowledged update running/started", sb.Status, sb.Reason)
		}
		tok, err := db.Tokens().ByHash(ctx, "crash-hash")
		if err != nil {
			t.Fatalf("Tokens.ByHash after SIGKILL = %v, want the row", err)
		}
		if tok.RevokedAt.IsZero() {
			t.Errorf("token RevokedAt after SIGKILL is zero, want the acknowledged revocation")
		}
		checkIntegrity(t, path)
	})

	t.Run("KilledMidStream", func(t *testing.T) {
		path := tempPath(t)
		const killAfter = 40
		acks, out := runCrashChild(t, path, "stream", killAfter)
		if len(acks) < killAfter {
			t.Fatalf("child acked %d creates before dying, want at least %d; output:\n%s", len(acks), killAfter, out)
		}
		db := open(t, path)
		for _, n := range acks {
			name := fmt.Sprintf("stream-%d", n)
			if _, err := db.Sandboxes().Get(t.Context(), "", name); err != nil {
				t.Errorf("Sandboxes.Get(%q), acknowledged before SIGKILL, = %v; want the row", name, err)
			}
		}
		list, err := db.Sandboxes().List(t.Context(), store.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		// The create in flight at the kill may or may not have committed.
		if len(list) < len(acks) || len(list) > len(acks)+1 {
			t.Errorf("%d sandboxes after SIGKILL, want %d acknowledged (+1 in flight)", len(list), len(acks))
		}
		checkIntegrity(t, path)
	})
}

// runCrashChild runs the child in mode on path until it dies, killing it
// after killAfter acks if it does not kill itself first. It returns the
// acked numbers, and the child's output for failure messages. The child
// must have died of SIGKILL.
func runCrashChild(t *testing.T, path, mode string, killAfter int) (acks []int, output string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCrashSafety$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnvDB+"="+path, crashEnvMode+"="+mode)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		lines = append(lines, line)
		if n, ok := strings.CutPrefix(line, "ack "); ok {
			v, err := strconv.Atoi(n)
			if err != nil {
				t.Errorf("child said %q", line)
				continue
			}
			acks = append(acks, v)
			if killAfter > 0 && len(acks) == killAfter {
				// The child is still writing: this lands mid-operation.
				cmd.Process.Signal(syscall.SIGKILL)
			}
		}
	}
	err = cmd.Wait()
	output = strings.Join(lines, "\n") + "\n" + stderr.String()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("child: %v, want death by SIGKILL; output:\n%s", err, output)
	}
	ws, ok := exit.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v, want death by SIGKILL; output:\n%s", err, output)
	}
	return acks, output
}

// crashChild is the child's side. It never returns normally: it dies by
// SIGKILL, its own or the parent's.
func crashChild(t *testing.T, path, mode string) {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatalf("child: Open = %v", err)
	}
	ack := func(n int) { fmt.Fprintf(os.Stdout, "ack %d\n", n) }
	now := time.Now()
	switch mode {
	case "once":
		sb := sandbox.Sandbox{ID: "sb-survivor", Name: "survivor", Status: sandbox.StatusCreating, CreatedAt: now, UpdatedAt: now}
		if err := db.Sandboxes().Create(ctx, sb); err != nil {
			t.Fatalf("child: Sandboxes.Create = %v", err)
		}
		ack(1)
		tok := store.Token{ID: "tok-1", Hash: "crash-hash", CreatedAt: now}
		if err := db.Tokens().Create(ctx, tok); err != nil {
			t.Fatalf("child: Tokens.Create = %v", err)
		}
		if err := db.Tokens().Revoke(ctx, tok.ID, now); err != nil {
			t.Fatalf("child: Tokens.Revoke = %v", err)
		}
		ack(2)
		sb.Status, sb.Reason = sandbox.StatusRunning, "started"
		if err := db.Sandboxes().Update(ctx, sb); err != nil {
			t.Fatalf("child: Sandboxes.Update = %v", err)
		}
		ack(3)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	case "stream":
		for n := 0; ; n++ {
			sb := sandbox.Sandbox{
				ID: fmt.Sprintf("sb-%d", n), Name: fmt.Sprintf("stream-%d", n),
				CreatedAt: now.Add(time.Duration(n)), UpdatedAt: now,
			}
			if err := db.Sandboxes().Create(ctx, sb); err != nil {
				t.Fatalf("child: Sandboxes.Create(%d) = %v", n, err)
			}
			ack(n)
		}
	default:
		t.Fatalf("child: unknown mode %q", mode)
	}
	time.Sleep(time.Minute) // the signal comes first
}

// checkIntegrity runs SQLite's own consistency check over the file.
func checkIntegrity(t *testing.T, path string) {
	t.Helper()
	var res string
	if err := raw(t, path).QueryRow("PRAGMA integrity_check").Scan(&res); err != nil {
		t.Fatalf("integrity_check: %v", err)
	}
	if res != "ok" {
		t.Errorf("integrity_check after SIGKILL = %q, want ok", res)
	}
}
