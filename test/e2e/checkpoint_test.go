package e2e_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/sandbox"
)

// TestCheckpoints walks the save points an agent uses on every runtime:
// checkpoint → change → restore → the change is gone and the old file is
// back; restore twice; fork independence; checkpoint of a live process
// keeps it running; sleep → exec wakes it with its files intact.
func TestCheckpoints(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, runtime string) {
		d := newDaemon(t, runtime)
		ctx := ctxT(t)
		c := d.Client()
		if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "cp"}); err != nil {
			t.Fatal(err)
		}
		sh := func(name, script string) string {
			t.Helper()
			var out bytes.Buffer
			res, err := c.Exec(ctx, name, sandbox.ExecRequest{Shell: script}, nil, &out, &out)
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("exec %q in %s = %+v, %v, %q", script, name, res, err, out.String())
			}
			return out.String()
		}
		// A background writer keeps running through the checkpoint.
		sh("cp", "echo v1 > data.txt; (i=0; while :; do i=$((i+1)); echo $i > /tmp/tick; sleep 0.05; done) > /dev/null 2>&1 &")
		time.Sleep(200 * time.Millisecond)
		ck, err := c.Checkpoint(ctx, "cp", sandbox.CheckpointRequest{Label: "before change"})
		if err != nil || ck.ID == "" || ck.Label != "before change" || ck.CreatedAt.IsZero() {
			t.Fatalf("Checkpoint = %+v, %v", ck, err)
		}
		before := sh("cp", "cat /tmp/tick")
		time.Sleep(300 * time.Millisecond)
		if after := sh("cp", "cat /tmp/tick"); after == before {
			t.Fatalf("the background writer stopped at the checkpoint: tick %q then %q", before, after)
		}

		sh("cp", "echo v2 > data.txt; echo new > extra.txt")
		if got := sh("cp", "cat data.txt"); got != "v2\n" {
			t.Fatalf("data.txt = %q, want v2", got)
		}
		for round := 1; round <= 2; round++ {
			sb, err := c.Restore(ctx, "cp", ck.ID)
			if err != nil || sb.Status != sandbox.StatusRunning || sb.Head != ck.ID {
				t.Fatalf("Restore #%d = %+v, %v; want running with head %s", round, sb, err, ck.ID)
			}
			if got := sh("cp", "cat data.txt; ls extra.txt 2>&1 || true"); !strings.HasPrefix(got, "v1\n") || !strings.Contains(got, "No such file") {
				t.Fatalf("after restore #%d: %q; want v1 back and extra.txt gone", round, got)
			}
			sh("cp", "echo v3 > data.txt")
		}

		// The size is what the sandbox wrote since its last restore: the
		// 3 MiB blob and a few small files.
		sh("cp", "head -c 3145728 /dev/urandom > blob")
		ck2, err := c.Checkpoint(ctx, "cp", sandbox.CheckpointRequest{Label: ""})
		if err != nil || ck2.Parent != ck.ID || ck2.SizeBytes < 3<<20 || ck2.SizeBytes > 5<<20 || ck.SizeBytes <= 0 {
			t.Fatalf("second Checkpoint = %+v, %v (first's size %d); want parent %s, 3-5 MiB, and a first size above 0", ck2, err, ck.SizeBytes, ck.ID)
		}
		list, err := c.ListCheckpoints(ctx, "cp")
		if err != nil || len(list) != 2 || list[0].ID != ck.ID || list[1].ID != ck2.ID {
			t.Fatalf("ListCheckpoints = %+v, %v; want [%s %s]", list, err, ck.ID, ck2.ID)
		}

		// Fork: a new sandbox from the first checkpoint, independent.
		fk, err := c.Fork(ctx, "cp", ck.ID, "cp-fork")
		if err != nil || fk.Status != sandbox.StatusRunning {
			t.Fatalf("Fork = %+v, %v", fk, err)
		}
		if got := sh("cp-fork", "cat data.txt"); got != "v1\n" {
			t.Fatalf("fork's data.txt = %q, want v1", got)
		}
		sh("cp-fork", "echo forked > data.txt")
		if got := sh("cp", "cat data.txt"); got != "v3\n" {
			t.Fatalf("the original's data.txt after the fork wrote = %q, want v3", got)
		}

		// Delete a checkpoint; its child and the fork keep working.
		if err := c.DeleteCheckpoint(ctx, "cp", ck.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Restore(ctx, "cp", ck.ID); !sandbox.IsCode(err, sandbox.CodeNotFound) {
			t.Fatalf("Restore(deleted) = %v; want not_found", err)
		}
		if _, err := c.Restore(ctx, "cp", ck2.ID); err != nil {
			t.Fatalf("Restore(child of the deleted) = %v", err)
		}
		if got := sh("cp", "cat data.txt"); got != "v3\n" {
			t.Fatalf("after restoring the second checkpoint data.txt = %q, want v3", got)
		}
		if got := sh("cp-fork", "cat data.txt"); got != "forked\n" {
			t.Fatalf("the fork after its checkpoint was deleted = %q", got)
		}

		// Sleep, then a call wakes it with its files.
		sb, err := c.Sleep(ctx, "cp")
		if err != nil || sb.Status != sandbox.StatusSleeping {
			t.Fatalf("Sleep = %+v, %v", sb, err)
		}
		if got := processesMentioning(sb.ID); len(got) != 0 {
			t.Fatalf("a sleeping sandbox still has processes: %v", got)
		}
		if got := sh("cp", "cat data.txt"); got != "v3\n" {
			t.Fatalf("exec on the sleeping sandbox = %q, want v3", got)
		}
		if sb, err = c.Get(ctx, "cp"); err != nil || sb.Status != sandbox.StatusRunning || !strings.Contains(sb.Reason, "woken") {
			t.Fatalf("after the waking exec: %+v, %v", sb, err)
		}
		if err := c.Destroy(ctx, "cp"); err != nil {
			t.Fatal(err)
		}
		assertNothingLeft(t, d, sb.ID)
		if err := c.Destroy(ctx, "cp-fork"); err != nil {
			t.Fatal(err)
		}
		assertNothingLeft(t, d, fk.ID)
		assertNothingLeft(t, d, ck2.ID) // its snapshot went with its sandbox
	})
}

// TestIdleSleep: a sandbox nobody calls goes to sleep after the idle window
// and the next call wakes it; a running command keeps it awake.
func TestIdleSleep(t *testing.T) {
	requireDaemon(t)
	d := newDaemon(t, bins.Runtimes[0], "--idle-timeout", "2s")
	ctx := ctxT(t)
	c := d.Client()
	if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "nap"}); err != nil {
		t.Fatal(err)
	}
	// A command longer than the window: no sleep under it.
	if res, err := c.Exec(ctx, "nap", sandbox.ExecRequest{Shell: "sleep 4; echo done > done.txt"}, nil, nil, nil); err != nil || res.ExitCode != 0 {
		t.Fatalf("long exec = %+v, %v", res, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	var sb sandbox.Sandbox
	for {
		var err error
		if sb, err = c.Get(ctx, "nap"); err != nil {
			t.Fatal(err)
		}
		if sb.Status == sandbox.StatusSleeping || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if sb.Status != sandbox.StatusSleeping || !strings.Contains(sb.Reason, "idle") {
		t.Fatalf("after the idle window: %s %q; want sleeping because idle", sb.Status, sb.Reason)
	}
	var out bytes.Buffer
	if res, err := c.Exec(ctx, "nap", sandbox.ExecRequest{Argv: []string{"cat", "done.txt"}}, nil, &out, &out); err != nil || res.ExitCode != 0 || out.String() != "done\n" {
		t.Fatalf("exec on the sleeping sandbox = %+v, %v, %q", res, err, out.String())
	}
}

// TestDiskLimit: a sandbox cannot write past its size's disk limit; the
// write fails inside it with a clear error, get reports the bytes used and
// the status says the disk is full; a restore frees it again.
func TestDiskLimit(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, runtime string) {
		d := newDaemon(t, runtime)
		ctx := ctxT(t)
		c := d.Client()
		sb, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "disk"}) // small: 2 GiB
		if err != nil {
			t.Fatal(err)
		}
		if sb.Resources.DiskBytes != 2<<30 {
			t.Fatalf("small sandbox disk limit = %d, want 2 GiB", sb.Resources.DiskBytes)
		}
		ck, err := c.Checkpoint(ctx, "disk", sandbox.CheckpointRequest{Label: "empty"})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		res, err := c.Exec(ctx, "disk", sandbox.ExecRequest{Shell: "fallocate -l 1900M a && head -c 300M /dev/zero > b; echo rc=$?", Timeout: sandbox.Duration(2 * time.Minute)}, nil, &out, &out)
		if err != nil || res.ExitCode != 0 || !strings.Contains(out.String(), "quota exceeded") || strings.Contains(out.String(), "rc=0") {
			t.Fatalf("writing 2.2 GB into a 2 GiB sandbox = %+v, %v, %q; want a disk quota error", res, err, out.String())
		}
		got, err := c.Get(ctx, "disk")
		if err != nil || got.DiskUsedBytes < 1900<<20 || !strings.HasPrefix(got.Reason, "disk full") {
			t.Fatalf("Get after filling the disk = used %d, reason %q, %v; want ≥ 1900 MiB and a disk full reason", got.DiskUsedBytes, got.Reason, err)
		}
		if _, err := c.Restore(ctx, "disk", ck.ID); err != nil {
			t.Fatal(err)
		}
		out.Reset()
		if res, err := c.Exec(ctx, "disk", sandbox.ExecRequest{Shell: "head -c 100M /dev/zero > c && echo ok"}, nil, &out, &out); err != nil || res.ExitCode != 0 || out.String() != "ok\n" {
			t.Fatalf("a write after the restore = %+v, %v, %q", res, err, out.String())
		}
	})
}

// TestMemoryCheckpoint: through the CLI, `hearth checkpoint --memory`
// under runsc saves a running process's memory: after the process is
// killed and its file changed, `hearth restore` brings back both the file
// (the snapshot taken at the same instant) and the process, with the value
// only its memory held; a plain checkpoint's restore starts without it.
// Under runc, --memory is refused with invalid_argument and nothing taken.
func TestMemoryCheckpoint(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, runtime string) {
		d := newDaemon(t, runtime)
		if _, stderr, code := d.CLI("", "create", "mem"); code != 0 {
			t.Fatalf("hearth create = %d %q", code, stderr)
		}
		sh := func(script string) string {
			t.Helper()
			out, stderr, code := d.CLI("", "exec", "mem", "--", "sh", "-c", script)
			if code != 0 {
				t.Fatalf("exec %q = %d %q %q", script, code, out, stderr)
			}
			return strings.TrimSpace(out)
		}
		// A process whose value is only in its memory writes it to a file.
		sh(`echo v1 > data.txt; python3 -c 'import os, time
v = os.urandom(8).hex()
open("/tmp/v.pid", "w").write(str(os.getpid()))
while True:
    open("/tmp/v.tmp", "w").write(v); os.replace("/tmp/v.tmp", "/tmp/v"); time.sleep(0.05)' >/dev/null 2>&1 &`)
		held := ""
		for deadline := time.Now().Add(10 * time.Second); held == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			held = sh("cat /tmp/v 2>/dev/null || true")
		}
		out, stderr, code := d.CLI("", "checkpoint", "mem", "--memory", "--json")
		if runtime != "runsc" {
			if code != sandbox.CodeInvalidArgument.ExitCode() || !strings.Contains(stderr, "cannot checkpoint memory") {
				t.Errorf("hearth checkpoint --memory under %s = %d %q; want invalid_argument", runtime, code, stderr)
			}
			return
		}
		var ck sandbox.Checkpoint
		if code != 0 || json.Unmarshal([]byte(out), &ck) != nil || !ck.Memory {
			t.Fatalf("hearth checkpoint --memory = %d %q %q; want a checkpoint with memory", code, out, stderr)
		}
		plain, stderr, code := d.CLI("", "checkpoint", "mem", "--json")
		var ck2 sandbox.Checkpoint
		if code != 0 || json.Unmarshal([]byte(plain), &ck2) != nil || ck2.Memory {
			t.Fatalf("hearth checkpoint = %d %q %q", code, plain, stderr)
		}
		sh("kill -9 $(cat /tmp/v.pid); rm -f /tmp/v; echo v2 > data.txt")
		if got := sh("sleep 0.3; cat /tmp/v 2>/dev/null || echo none"); got != "none" {
			t.Fatalf("the process still writes %q after it was killed", got)
		}
		out, stderr, code = d.CLI("", "restore", "mem", ck.ID, "--json")
		var sb sandbox.Sandbox
		if code != 0 || json.Unmarshal([]byte(out), &sb) != nil || !strings.HasSuffix(sb.Reason, "with its processes") {
			t.Fatalf("hearth restore (memory) = %d %q %q; want it restored with its processes", code, out, stderr)
		}
		got := ""
		for deadline := time.Now().Add(10 * time.Second); got == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			got = sh("cat /tmp/v 2>/dev/null || true")
		}
		if got != held || sh("cat data.txt") != "v1" {
			t.Errorf("after the memory restore: the process wrote %q (want %q, the value it held) and data.txt is %q (want v1)", got, held, sh("cat data.txt"))
		}
		// Calls that arrive while a memory checkpoint has the agent quiet
		// wait for it: none fails. (A checkpoint that meets a command
		// running is refused, unavailable, and tried again.)
		c := d.Client()
		ctx := ctxT(t)
		stop := make(chan struct{})
		failed := make(chan error, 1)
		go func() {
			defer close(failed)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if res, err := c.Exec(ctx, "mem", sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil); err != nil || res.ExitCode != 0 {
					failed <- fmt.Errorf("exec during memory checkpoints = %+v, %v", res, err)
					return
				}
			}
		}()
		taken := 0
		for deadline := time.Now().Add(60 * time.Second); taken < 3 && time.Now().Before(deadline); {
			_, err := c.Checkpoint(ctx, "mem", sandbox.CheckpointRequest{Memory: true})
			switch {
			case err == nil:
				taken++
			case !sandbox.IsCode(err, sandbox.CodeUnavailable):
				t.Fatalf("memory checkpoint under calls = %v", err)
			}
		}
		close(stop)
		if err := <-failed; err != nil {
			t.Error(err)
		}
		if taken < 3 {
			t.Errorf("took %d memory checkpoints among calls in 60 s, want 3", taken)
		}

		if _, stderr, code := d.CLI("", "restore", "mem", ck2.ID); code != 0 {
			t.Fatalf("hearth restore (plain) = %d %q", code, stderr)
		}
		if got := sh("rm -f /tmp/v; sleep 0.3; cat /tmp/v 2>/dev/null || echo none"); got != "none" {
			t.Errorf("after a plain restore a process still writes %q; want none running", got)
		}
	})
}

// TestForkMemory: under runsc a fork of a memory checkpoint resumes the
// checkpoint's processes in the new sandbox, with the value only their
// memory held, on the checkpoint's files, while the source (whose process
// was killed after the checkpoint) runs none of them; two forks of one
// checkpoint each run their own copy, and ending one leaves the other. A
// fork of an egress sandbox has no network, as every fork: its processes
// start afresh (gVisor restores memory only with the network it was taken
// with), which its reason says, on the checkpoint's files; it reaches no
// host, and the source still does.
func TestForkMemory(t *testing.T) {
	d := runscDaemon(t)
	ctx := ctxT(t)
	c := d.Client()
	sh := func(name, script string) string {
		t.Helper()
		var out, errb bytes.Buffer
		res, err := c.Exec(ctx, name, sandbox.ExecRequest{Shell: script}, nil, &out, &errb)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec %q in %s = %+v, %v, %q", script, name, res, err, errb.String())
		}
		return strings.TrimSpace(out.String())
	}
	// written waits for a process to write /tmp/v in sandbox name again
	// and returns what it wrote ("" if nothing did within 10 s).
	written := func(name string) string {
		t.Helper()
		got := ""
		for deadline := time.Now().Add(10 * time.Second); got == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			got = sh(name, "cat /tmp/v 2>/dev/null || true")
		}
		return got
	}
	// hold creates sandbox name with network and starts in it a process
	// that keeps writing a value only its memory holds to /tmp/v; it
	// returns a memory checkpoint taken then, and the value, after which
	// the process is killed and data.txt changed.
	hold := func(name, network string) (sandbox.Checkpoint, string) {
		t.Helper()
		if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: name, Network: network}); err != nil {
			t.Fatal(err)
		}
		sh(name, `echo v1 > data.txt; python3 -c 'import os, time
v = os.urandom(8).hex()
open("/tmp/v.pid", "w").write(str(os.getpid()))
while True:
    open("/tmp/v.tmp", "w").write(v); os.replace("/tmp/v.tmp", "/tmp/v"); time.sleep(0.05)' >/dev/null 2>&1 &`)
		held := written(name)
		if held == "" {
			t.Fatalf("the process in %s wrote nothing", name)
		}
		ck, err := c.Checkpoint(ctx, name, sandbox.CheckpointRequest{Memory: true})
		if err != nil || !ck.Memory {
			t.Fatalf("memory checkpoint of %s = %+v, %v", name, ck, err)
		}
		sh(name, "kill -9 $(cat /tmp/v.pid); rm -f /tmp/v; echo v2 > data.txt")
		return ck, held
	}
	// fork forks name at ck into newName and checks that the process
	// resumed there with held, on the checkpoint's files.
	fork := func(name string, ck sandbox.Checkpoint, newName, held string) sandbox.Sandbox {
		t.Helper()
		fk, err := c.Fork(ctx, name, ck.ID, newName)
		if err != nil || fk.Status != sandbox.StatusRunning || !strings.HasSuffix(fk.Reason, "with its processes") {
			t.Fatalf("fork %s of the memory checkpoint = %+v, %v; want it running with its processes", newName, fk, err)
		}
		if got := sh(newName, "cat data.txt"); got != "v1" {
			t.Errorf("%s's data.txt = %q, want v1 (the checkpoint's)", newName, got)
		}
		sh(newName, "rm -f /tmp/v")
		if got := written(newName); got != held {
			t.Fatalf("in %s the resumed process wrote %q, want %q (the value only its memory held)", newName, got, held)
		}
		return fk
	}

	ck, held := hold("src", sandbox.NetworkNone)
	fork("src", ck, "twin", held)
	fork("src", ck, "twin2", held)
	if got := sh("src", "sleep 0.3; cat /tmp/v 2>/dev/null || echo none"); got != "none" {
		t.Errorf("src, whose process was killed, has a writer again: %q", got)
	}
	sh("twin", "kill -9 $(cat /tmp/v.pid); rm -f /tmp/v")
	if got := sh("twin", "sleep 0.3; cat /tmp/v 2>/dev/null || echo none"); got != "none" {
		t.Errorf("twin still has a writer after its process was killed: %q", got)
	}
	sh("twin2", "rm -f /tmp/v")
	if got := written("twin2"); got != held {
		t.Errorf("twin2's process after twin's was killed wrote %q, want %q: each fork runs its own", got, held)
	}

	host := drivertest.NewTestHost(t, netip.MustParseAddr("203.0.113.9"), 8099)
	probe := func(name string) string {
		t.Helper()
		var out bytes.Buffer
		res, err := c.Exec(ctx, name, sandbox.ExecRequest{Argv: []string{"python3", "-c", drivertest.ConnectProbe, host.Target()}}, nil, &out, nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("probe in %s = %+v, %v", name, res, err)
		}
		return drivertest.ParseProbe(out.String())[host.Target()]
	}
	nck, _ := hold("out", sandbox.NetworkEgress)
	if got := probe("out"); got != "ok" {
		t.Fatalf("the egress source to the test host: %s, want ok", got)
	}
	nfk, err := c.Fork(ctx, "out", nck.ID, "outtwin")
	if err != nil || nfk.Status != sandbox.StatusRunning || nfk.Network != sandbox.NetworkNone || !strings.Contains(nfk.Reason, "started afresh: their memory holds a network") {
		t.Fatalf("fork of an egress sandbox's memory checkpoint = %+v, %v; want it running without a network, its processes afresh, said", nfk, err)
	}
	if got := sh("outtwin", "cat data.txt; rm -f /tmp/v; sleep 0.3; cat /tmp/v 2>/dev/null || echo none"); got != "v1\nnone" {
		t.Errorf("the egress sandbox's fork: data.txt and a writer = %q, want v1 and none", got)
	}
	if got := probe("outtwin"); got == "ok" {
		t.Errorf("the fork, without a network, reached the test host")
	}
	if got := probe("out"); got != "ok" {
		t.Errorf("the egress source after its fork to the test host: %s, want ok", got)
	}
}
