package drivertest

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/driver"
)

// holdScript is a background process whose only copy of a random value is
// in its memory: it writes the value into /tmp/held, which it keeps open,
// every 50 ms, and its pid to /tmp/held.pid. (A memory image restores the
// files its processes hold open by path: a process caught holding a
// temporary name that is gone at the restore cannot be restored, so the
// script holds one name that stays.)
const holdScript = `import os, time
open("/tmp/held.pid", "w").write(str(os.getpid()))
v = os.urandom(8).hex().encode()
fd = os.open("/tmp/held", os.O_WRONLY | os.O_CREAT, 0o644)
while True:
    os.pwrite(fd, v, 0)
    time.sleep(0.05)
`

// testMemoryCheckpoint, for a driver whose Capabilities say
// MemoryCheckpoint (a driver.MemoryCheckpointer): CheckpointMemory of a
// running sandbox runs the paused function and leaves the sandbox running
// and answering; after its process is killed, its value's file emptied
// and the sandbox stopped, RestoreMemory brings the process back with the
// value it held in memory; an unknown image fails RestoreMemory, leaving
// the sandbox stopped and startable; DeleteMemory removes the image.
func (s *suite) testMemoryCheckpoint(t *testing.T) {
	d, mc, spec, sh := s.memorySandbox(t, holdScript)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	held := waitFile(t, sh, "/tmp/held")

	key := "img" + newID()
	pausedRan := false
	began := time.Now()
	if err := mc.CheckpointMemory(ctx, spec.ID, key, driver.MemoryOptions{Paused: func() error { pausedRan = true; return nil }}); err != nil {
		t.Fatalf("CheckpointMemory(%s) = %v", spec.ID, err)
	}
	t.Logf("CheckpointMemory(%s) took %v", spec.ID, time.Since(began).Round(time.Millisecond))
	if !pausedRan {
		t.Errorf("CheckpointMemory did not run the paused function")
	}
	if got := strings.TrimSpace(sh("cat /tmp/held")); got != held {
		t.Errorf("after CheckpointMemory the process wrote %q, want it still running with %q", got, held)
	}

	sh("kill -9 $(cat /tmp/held.pid); : > /tmp/held")
	if err := d.Stop(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	if err := mc.RestoreMemory(ctx, spec, "nosuchimage"); err == nil {
		t.Errorf("RestoreMemory(an unknown image) = nil, want an error")
	}
	began = time.Now()
	if err := mc.RestoreMemory(ctx, spec, key); err != nil {
		t.Fatalf("RestoreMemory(%s) = %v", spec.ID, err)
	}
	t.Logf("RestoreMemory(%s) took %v", spec.ID, time.Since(began).Round(time.Millisecond))
	if got := waitFile(t, sh, "/tmp/held"); got != held {
		t.Errorf("after RestoreMemory the process wrote %q, want the value it held in memory, %q", got, held)
	}
	if err := mc.DeleteMemory(ctx, key); err != nil {
		t.Errorf("DeleteMemory = %v", err)
	}
	if err := d.Stop(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	if err := mc.RestoreMemory(ctx, spec, key); err == nil {
		t.Errorf("RestoreMemory of a deleted image = nil, want an error")
	}
	s.start(t, d, spec)
}

// countScript is a background process that counts in its memory and
// appends each number, a line every 20 ms, to /tmp/count on the root.
const countScript = `import os, time
fd = os.open("/tmp/count", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
n = 0
while True:
    n += 1
    os.write(fd, b"%d\n" % n)
    time.sleep(0.02)
`

// testMemoryCheckpointStop, for a MemoryCheckpointer: CheckpointMemory
// with Stop leaves the sandbox stopped at the image's instant. A process
// counting onto the root has written no line more once the call returns
// than Paused found there, the driver reports the sandbox stopped, and a
// RestoreMemory on that root resumes the process, which goes on counting
// from where it was: the file's lines run 1, 2, 3, … without a gap or a
// repeat.
func (s *suite) testMemoryCheckpointStop(t *testing.T) {
	d, mc, spec, sh := s.memorySandbox(t, countScript)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	waitFile(t, sh, "/tmp/count")
	onHost := filepath.Join(spec.RootFS, "tmp", "count")
	lines := func() []string {
		b, err := os.ReadFile(onHost)
		if err != nil {
			t.Fatalf("read the count on the host: %v", err)
		}
		return strings.Fields(string(b))
	}
	time.Sleep(100 * time.Millisecond)

	key := "img" + newID()
	var atImage int
	if err := mc.CheckpointMemory(ctx, spec.ID, key, driver.MemoryOptions{Stop: true, Paused: func() error {
		atImage = len(lines())
		return nil
	}}); err != nil {
		t.Fatalf("CheckpointMemory(%s, Stop) = %v", spec.ID, err)
	}
	if st, err := d.State(ctx, spec.ID); err != nil || st.Status != driver.StatusStopped {
		t.Errorf("after CheckpointMemory(Stop), State = %+v, %v; want stopped", st, err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := len(lines()); n != atImage || atImage < 3 {
		t.Fatalf("the count had %d lines at the image and has %d after CheckpointMemory(Stop) returned; want the same, at least 3", atImage, n)
	}

	if err := mc.RestoreMemory(ctx, spec, key); err != nil {
		t.Fatalf("RestoreMemory(%s) = %v", spec.ID, err)
	}
	for deadline := time.Now().Add(10 * time.Second); len(lines()) < atImage+5; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after RestoreMemory the count stayed at %d lines, want it to go on from %d", len(lines()), atImage)
		}
	}
	for i, l := range lines() {
		if l != strconv.Itoa(i+1) {
			t.Fatalf("line %d of the count is %q, want %d: the process did not resume where the image left it (image at line %d)", i+1, l, i+1, atImage)
		}
	}
	if err := mc.DeleteMemory(ctx, key); err != nil {
		t.Errorf("DeleteMemory = %v", err)
	}
}

// memorySandbox starts a sandbox on a new driver that can checkpoint
// memory (it skips t for one that cannot) with python3 program in the
// background, and returns them and a shell in the sandbox.
func (s *suite) memorySandbox(t *testing.T, program string) (driver.Driver, driver.MemoryCheckpointer, driver.Spec, func(string) string) {
	t.Helper()
	d := s.cfg.New(t).Driver
	mc, ok := d.(driver.MemoryCheckpointer)
	if !d.Capabilities().MemoryCheckpoint {
		t.Skip("the driver cannot checkpoint memory (Capabilities().MemoryCheckpoint is false)")
	}
	if !ok {
		t.Fatalf("the driver's Capabilities say MemoryCheckpoint, but it is not a driver.MemoryCheckpointer")
	}
	spec := s.spec(t)
	s.start(t, d, spec)
	sh := func(script string) string { return execArgv(t, d, spec.ID, "sh", "-c", script) }
	sh("python3 -c '" + program + "' >/dev/null 2>&1 &")
	return d, mc, spec, sh
}

// waitFile returns the content of path in the sandbox once it exists (10
// seconds at most).
func waitFile(t *testing.T, sh func(string) string, path string) string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if out := strings.TrimSpace(sh("cat " + path + " 2>/dev/null || true")); out != "" {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared in the sandbox", path)
		}
	}
}
