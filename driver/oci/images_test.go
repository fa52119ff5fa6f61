package oci_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/driver/oci"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/secrets"
)

func newBox(t testing.TB) *secrets.Box {
	t.Helper()
	key := make([]byte, secrets.KeySize)
	rand.Read(key)
	box, err := secrets.New(key)
	if err != nil {
		t.Fatal(err)
	}
	return box
}

// mountsUnder lists the mount points under dir.
func mountsUnder(t testing.TB, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	return out
}

// TestMemoryImageSealed (runsc): a memory image holds nothing of the
// sandbox's memory in plaintext (a value a process holds is in what it
// seals, and not in its files), no tmpfs is left mounted after a
// checkpoint or a restore, and an image altered on disk fails to restore
// with ErrImageSealed, leaving the sandbox stopped and startable.
func TestMemoryImageSealed(t *testing.T) {
	drivertest.RequireRoot(t)
	base := drivertest.BaseRootFS(t)
	agentPath := drivertest.BuildAgent(t)
	dir := t.TempDir()
	t.Cleanup(func() { drivertest.UnmountUnder(t, dir) })
	box := newBox(t)
	d, err := oci.New(oci.Options{Runtime: oci.RuntimeRunsc, Binary: findRuntime(t, oci.RuntimeRunsc), StateDir: dir, Sealer: box, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	unmountAfter(t, d)
	spec := driver.Spec{
		ID: "sealed", RootFS: drivertest.OverlayRootFS(t, base), AgentPath: agentPath,
		UID: 1000, GID: 1000, Home: "/home/sandbox", Resources: sandbox.Sizes()[sandbox.DefaultSize],
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := d.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Delete(context.Background(), spec.ID) })
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.Dial(ctx, spec.ID) })
	value := make([]byte, 24)
	rand.Read(value)
	for i := range value {
		value[i] = 'a' + value[i]%26
	}
	hold := `cat > /tmp/v; python3 -c 'import os, time; v = open("/tmp/v").read() * 2; os.remove("/tmp/v"); time.sleep(100000)' >/dev/null 2>&1 &
while [ -e /tmp/v ]; do sleep 0.1; done`
	if res, err := c.Exec(ctx, sandbox.ExecRequest{Shell: hold}, strings.NewReader(string(value)), nil, nil); err != nil || res.ExitCode != 0 {
		t.Fatalf("hold = %+v, %v", res, err)
	}
	needle := bytes.Repeat(value, 2) // only the process's memory holds it doubled
	const key = "imgsealed"
	if err := d.CheckpointMemory(ctx, spec.ID, key, driver.MemoryOptions{}); err != nil {
		t.Fatalf("CheckpointMemory = %v", err)
	}
	if err := d.WaitSealed(ctx, key); err != nil {
		t.Fatal(err)
	}
	if m := mountsUnder(t, filepath.Join(dir, "memory")); len(m) != 0 {
		t.Errorf("mounts left after CheckpointMemory's seal: %v", m)
	}
	if _, err := os.Stat(filepath.Join(dir, "memory", key+".taken")); !os.IsNotExist(err) {
		t.Errorf("the taken marker is still there after the seal: %v", err)
	}
	image := filepath.Join(dir, "memory", key)
	entries, err := os.ReadDir(image)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		b, err := os.ReadFile(filepath.Join(image, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, needle) || bytes.Contains(b, []byte("checkpoint")) && e.Name() != "key" && !strings.HasSuffix(e.Name(), ".sealed") {
			t.Errorf("%s holds plaintext", e.Name())
		}
	}
	t.Logf("image files: %v", names)
	found := 0
	if err := oci.OpenMemoryImage(image, key, box, func(name string, r io.Reader) error {
		b, err := io.ReadAll(r)
		found += bytes.Count(b, needle)
		t.Logf("%s: %d bytes, %d of the value, %d doubled", name, len(b), bytes.Count(b, value), bytes.Count(b, needle))
		return err
	}); err != nil {
		t.Fatalf("OpenMemoryImage = %v", err)
	}
	if found == 0 {
		t.Errorf("the opened image does not hold the process's value: the search above proves nothing")
	}
	if err := oci.OpenMemoryImage(image, key, newBox(t), func(string, io.Reader) error { return nil }); !errors.Is(err, oci.ErrImageSealed) {
		t.Errorf("OpenMemoryImage with another data dir's key = %v, want ErrImageSealed", err)
	}

	// Restore works, and leaves no mount behind.
	if err := d.Stop(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	if err := d.RestoreMemory(ctx, spec, key); err != nil {
		t.Fatalf("RestoreMemory = %v", err)
	}
	if m := mountsUnder(t, filepath.Join(dir, "memory")); len(m) != 0 {
		t.Errorf("mounts left after RestoreMemory: %v", m)
	}
	var out bytes.Buffer
	if res, err := c.Exec(ctx, sandbox.ExecRequest{Shell: "pgrep -c python3 || ls /proc | grep -c '^[0-9]'"}, nil, &out, nil); err != nil || res.ExitCode != 0 {
		t.Errorf("exec after RestoreMemory = %+v, %v, %q", res, err, out.String())
	}

	// An altered image does not restore.
	if err := d.Stop(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	pages := filepath.Join(image, "pages.img"+".sealed")
	f, err := os.OpenFile(pages, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff, 0xee}, 4096); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := d.RestoreMemory(ctx, spec, key); !errors.Is(err, oci.ErrImageSealed) {
		t.Errorf("RestoreMemory of an altered image = %v, want ErrImageSealed", err)
	}
	if m := mountsUnder(t, filepath.Join(dir, "memory")); len(m) != 0 {
		t.Errorf("mounts left after a failed RestoreMemory: %v", m)
	}
	if st, err := d.State(ctx, spec.ID); err != nil || st.Status != driver.StatusStopped {
		t.Errorf("after a failed RestoreMemory: %+v, %v; want stopped", st, err)
	}
	if err := d.Start(ctx, spec); err != nil {
		t.Errorf("Start after a failed RestoreMemory = %v", err)
	}
}

// TestRecoverImages: Recover removes a half-written image and a tmpfs a
// killed daemon left mounted, seals an image a killed daemon had taken
// into a tmpfs and not yet sealed (its taken marker names the tmpfs), and
// one an older daemon wrote in plaintext, ignores a taken marker that
// names anything else, and lists only whole images.
func TestRecoverImages(t *testing.T) {
	drivertest.RequireRoot(t)
	dir := t.TempDir()
	t.Cleanup(func() { drivertest.UnmountUnder(t, dir) })
	box := newBox(t)
	d, err := oci.New(oci.Options{Runtime: oci.RuntimeRunsc, Binary: findRuntime(t, oci.RuntimeRunsc), StateDir: dir, Sealer: box})
	if err != nil {
		t.Fatal(err)
	}
	unmountAfter(t, d)
	mem := filepath.Join(dir, "memory")
	half := filepath.Join(mem, "ckhalf.tmp")
	legacy := filepath.Join(mem, "cklegacy")
	mount := filepath.Join(mem, "ckmounted.save-0a0b0c")
	for _, p := range []string{half, legacy, mount} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(half, "pages.img"), []byte("half"), 0o600)
	os.WriteFile(filepath.Join(legacy, "checkpoint.img"), []byte("legacy plaintext state"), 0o600)
	os.WriteFile(filepath.Join(legacy, "pages.img"), []byte("legacy plaintext pages"), 0o600)
	if err := mountTmpfs(mount); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(mount, "pages.img"), []byte("plaintext in memory"), 0o600)
	taken := filepath.Join(mem, "cktaken.save-0d0e0f")
	if err := os.Mkdir(taken, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := mountTmpfs(taken); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(taken, "checkpoint.img"), []byte("taken state"), 0o600)
	os.WriteFile(filepath.Join(taken, "pages.img"), []byte("taken pages"), 0o600)
	os.WriteFile(filepath.Join(mem, "cktaken.taken"), []byte("cktaken.save-0d0e0f"), 0o600)
	// Markers that name no tmpfs of their own image.
	os.WriteFile(filepath.Join(mem, "ckstray.taken"), []byte("../../../etc"), 0o600)
	os.WriteFile(filepath.Join(mem, "ckother.taken"), []byte("cktaken.save-0d0e0f"), 0o600)

	if _, err := d.Recover(context.Background()); err != nil {
		t.Fatalf("Recover = %v", err)
	}
	for _, p := range []string{half, mount, taken, filepath.Join(mem, "cktaken.taken"), filepath.Join(mem, "ckstray.taken"),
		filepath.Join(mem, "ckother.taken"), filepath.Join(mem, "ckstray"), filepath.Join(mem, "ckother")} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s is still there after Recover: %v", p, err)
		}
	}
	if m := mountsUnder(t, filepath.Join(dir, "memory")); len(m) != 0 {
		t.Errorf("mounts left after Recover: %v", m)
	}
	got := map[string]string{}
	if err := oci.OpenMemoryImage(legacy, "cklegacy", box, func(name string, r io.Reader) error {
		b, err := io.ReadAll(r)
		got[name] = string(b)
		return err
	}); err != nil || got["checkpoint.img"] != "legacy plaintext state" || got["pages.img"] != "legacy plaintext pages" {
		t.Errorf("the legacy image after Recover opens as %q, %v", got, err)
	}
	for _, name := range []string{"checkpoint.img", "pages.img"} {
		if _, err := os.Stat(filepath.Join(legacy, name)); !os.IsNotExist(err) {
			t.Errorf("the legacy image's plaintext %s is still there: %v", name, err)
		}
	}
	got = map[string]string{}
	if err := oci.OpenMemoryImage(filepath.Join(mem, "cktaken"), "cktaken", box, func(name string, r io.Reader) error {
		b, err := io.ReadAll(r)
		got[name] = string(b)
		return err
	}); err != nil || got["checkpoint.img"] != "taken state" || got["pages.img"] != "taken pages" {
		t.Errorf("the taken image after Recover opens as %q, %v", got, err)
	}
	if keys, err := d.MemoryImages(context.Background()); err != nil || !slices.Equal(keys, []string{"cklegacy", "cktaken"}) {
		t.Errorf("MemoryImages = %q, %v; want [cklegacy cktaken]", keys, err)
	}
}

// mountTmpfs mounts a tmpfs at dir, as a memory checkpoint does.
func mountTmpfs(dir string) error { return unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m") }

// TestMemoryCheckpointFullSandbox (runsc): a sandbox whose process holds
// most of its memory survives a memory checkpoint, although the image's
// tmpfs pages, which gVisor's sentry writes, are charged to its cgroup
// meanwhile; afterwards the cgroup's limits are back where they were.
func TestMemoryCheckpointFullSandbox(t *testing.T) {
	d, spec, dir, c := startRunsc(t, "full", "small")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	limits := func() string { return memoryLimits(spec.ID) }
	before := limits()
	// 400 MiB of the small size's 512, touched page by page.
	hold := `python3 -c 'import time; b = bytearray(400 << 20)
for i in range(0, len(b), 4096): b[i] = 1
open("/tmp/held", "w").write("yes"); time.sleep(100000)' >/dev/null 2>&1 &
while [ ! -e /tmp/held ]; do sleep 0.1; done`
	if res, err := c.Exec(ctx, sandbox.ExecRequest{Shell: hold}, nil, nil, nil); err != nil || res.ExitCode != 0 {
		t.Fatalf("hold = %+v, %v", res, err)
	}
	if err := d.CheckpointMemory(ctx, spec.ID, "imgfull", driver.MemoryOptions{}); err != nil {
		t.Fatalf("CheckpointMemory = %v", err)
	}
	if st, err := d.State(ctx, spec.ID); err != nil || st.Status != driver.StatusRunning || st.OOMKilled {
		t.Fatalf("after CheckpointMemory: %+v, %v; want running", st, err)
	}
	var out bytes.Buffer
	if res, err := c.Exec(ctx, sandbox.ExecRequest{Shell: "pgrep -c python3 || ls -d /proc/[0-9]* | wc -l"}, nil, &out, nil); err != nil || res.ExitCode != 0 {
		t.Errorf("after CheckpointMemory: %+v, %v, %q", res, err, out.String())
	}
	if err := d.WaitSealed(ctx, "imgfull"); err != nil {
		t.Fatal(err)
	}
	if after := limits(); after != before {
		t.Errorf("memory limits after CheckpointMemory's seal = %s, want %s as before", after, before)
	}
	if _, err := os.Stat(filepath.Join(dir, "sandboxes", spec.ID, "memory-raised")); !os.IsNotExist(err) {
		t.Errorf("the raised-limit marker is still there: %v", err)
	}
}

// TestMemoryImageSealLifecycle (runsc): a memory checkpoint returns before
// its image is sealed; a DeleteMemory at once stops the seal and leaves
// nothing (no image, no half-written one, no marker, no tmpfs, the memory
// limits as before); a RestoreMemory at once waits for the seal and brings
// the process back.
func TestMemoryImageSealLifecycle(t *testing.T) {
	d, spec, dir, c := startRunsc(t, "sealing", "medium")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	limits := func() string { return memoryLimits(spec.ID) }
	before := limits()
	hold := `python3 -c 'import os, time; b = bytearray(os.urandom(150 << 20)); open("/tmp/held", "w").write("yes"); time.sleep(100000)' >/dev/null 2>&1 &
while [ ! -e /tmp/held ]; do sleep 0.1; done`
	if res, err := c.Exec(ctx, sandbox.ExecRequest{Shell: hold}, nil, nil, nil); err != nil || res.ExitCode != 0 {
		t.Fatalf("hold = %+v, %v", res, err)
	}
	mem := filepath.Join(dir, "memory")
	if err := d.CheckpointMemory(ctx, spec.ID, "imgdeleted", driver.MemoryOptions{}); err != nil {
		t.Fatalf("CheckpointMemory = %v", err)
	}
	if err := d.DeleteMemory(ctx, "imgdeleted"); err != nil {
		t.Fatalf("DeleteMemory at once = %v", err)
	}
	for _, p := range []string{"imgdeleted", "imgdeleted.tmp", "imgdeleted.taken"} {
		if _, err := os.Lstat(filepath.Join(mem, p)); !os.IsNotExist(err) {
			t.Errorf("%s is there after DeleteMemory: %v", p, err)
		}
	}
	if m := mountsUnder(t, mem); len(m) != 0 {
		t.Errorf("mounts left after DeleteMemory: %v", m)
	}
	if after := limits(); after != before {
		t.Errorf("memory limit after DeleteMemory = %s, want %s as before", after, before)
	}

	if err := d.CheckpointMemory(ctx, spec.ID, "imgkept", driver.MemoryOptions{}); err != nil {
		t.Fatalf("CheckpointMemory = %v", err)
	}
	if err := d.Stop(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	if err := d.RestoreMemory(ctx, spec, "imgkept"); err != nil {
		t.Fatalf("RestoreMemory at once = %v", err)
	}
	var out bytes.Buffer
	if res, err := c.Exec(ctx, sandbox.ExecRequest{Shell: "cat /tmp/held; pgrep -c python3 || ls -d /proc/[0-9]* | wc -l"}, nil, &out, nil); err != nil || res.ExitCode != 0 || !strings.HasPrefix(out.String(), "yes") {
		t.Errorf("after RestoreMemory: %+v, %v, %q", res, err, out.String())
	}
	if m := mountsUnder(t, mem); len(m) != 0 {
		t.Errorf("mounts left after the seal and the restore: %v", m)
	}
}

// startRunsc starts sandbox id of size under runsc, with a driver of its
// own on a new state dir (with a sealer), and returns them and a client
// of its agent; the test's cleanup deletes it.
func startRunsc(t *testing.T, id, size string) (*oci.Driver, driver.Spec, string, *agent.Client) {
	t.Helper()
	drivertest.RequireRoot(t)
	base := drivertest.BaseRootFS(t)
	agentPath := drivertest.BuildAgent(t)
	dir := t.TempDir()
	t.Cleanup(func() { drivertest.UnmountUnder(t, dir) })
	d, err := oci.New(oci.Options{Runtime: oci.RuntimeRunsc, Binary: findRuntime(t, oci.RuntimeRunsc), StateDir: dir, Sealer: newBox(t), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	unmountAfter(t, d)
	spec := driver.Spec{
		ID: id, RootFS: drivertest.OverlayRootFS(t, base), AgentPath: agentPath,
		UID: 1000, GID: 1000, Home: "/home/sandbox", Resources: sandbox.Sizes()[size],
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := d.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Delete(context.Background(), spec.ID) })
	return d, spec, dir, agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.Dial(ctx, spec.ID) })
}

// memoryLimits returns sandbox id's memory cgroup's limit and swap limit
// (cgroup v1).
func memoryLimits(id string) string {
	var out []string
	for _, f := range []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"} {
		b, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory/hearth", id, f))
		out = append(out, strings.TrimSpace(string(b)))
	}
	return strings.Join(out, " ")
}

// TestRecoverLowersRaisedLimits (runsc): a daemon killed while a memory
// checkpoint had a sandbox's memory limits raised leaves them raised, with
// the old ones in the sandbox's memory-raised marker; the next daemon's
// Recover puts them back, removes the marker, and leaves the sandbox
// running.
func TestRecoverLowersRaisedLimits(t *testing.T) {
	_, spec, dir, _ := startRunsc(t, "raised", "small")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	before := memoryLimits(spec.ID)
	cg := filepath.Join("/sys/fs/cgroup/memory/hearth", spec.ID)
	files := []string{filepath.Join(cg, "memory.memsw.limit_in_bytes"), filepath.Join(cg, "memory.limit_in_bytes")}
	old := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		old[f] = strings.TrimSpace(string(b))
	}
	rec, _ := json.Marshal(old)
	marker := filepath.Join(dir, "sandboxes", spec.ID, "memory-raised")
	if err := os.WriteFile(marker, rec, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range files { // memsw first: it stays at least the limit
		v, err := strconv.ParseInt(old[f], 10, 64)
		if err != nil || v >= 1<<62 {
			continue // unlimited: a checkpoint leaves it so
		}
		if err := os.WriteFile(f, []byte(strconv.FormatInt(v+256<<20, 10)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if memoryLimits(spec.ID) == before {
		t.Fatalf("the limits did not rise from %s: the test proves nothing", before)
	}
	d2, err := oci.New(oci.Options{Runtime: oci.RuntimeRunsc, Binary: findRuntime(t, oci.RuntimeRunsc), StateDir: dir, Sealer: newBox(t), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d2.Recover(ctx); err != nil {
		t.Fatalf("Recover = %v", err)
	}
	if after := memoryLimits(spec.ID); after != before {
		t.Errorf("memory limits after Recover = %s, want %s as before the raise", after, before)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the raised-limit marker is still there after Recover: %v", err)
	}
	if st, err := d2.State(ctx, spec.ID); err != nil || st.Status != driver.StatusRunning {
		t.Errorf("after Recover: %+v, %v; want running", st, err)
	}
}
