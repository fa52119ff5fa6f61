package e2e_test

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/hearth/hearth/internal/hostusage"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/daemonproc"
)

// TestStartsShortOfMemory: a daemon whose memory reserve (`hearth serve
// --memory-reserve`) is above what this host has available refuses every
// start before it makes anything. A create is unavailable with the
// resource, the host's available and total memory in MiB and what a start
// needs, and leaves no sandbox, runtime container, process, mount or
// cgroup; a sleeping sandbox's wake is refused the same way and it stays
// asleep with its files. With the default reserve again, the wake and the
// create work.
func TestStartsShortOfMemory(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, runtime string) {
		ctx := ctxT(t)
		d := newDaemon(t, runtime)
		c := d.Client()
		if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "kept"}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.WriteFile(ctx, "kept", sandbox.WriteRequest{Path: "/tmp/note"}, bytes.NewReader([]byte("still here"))); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Sleep(ctx, "kept"); err != nil {
			t.Fatal(err)
		}
		mem, err := hostusage.ReadMemory(hostusage.Proc)
		if err != nil {
			t.Fatal(err)
		}
		d.Stop()
		d.Args = []string{"--memory-reserve", strconv.FormatInt(mem.Total, 10)}
		d.Start()
		c = d.Client() // a new port
		runtimeBefore, err := d.RuntimeSandboxes()
		if err != nil {
			t.Fatal(err)
		}
		hostBefore := instanceOnHost(t, d)

		_, _, err = c.Create(ctx, sandbox.CreateRequest{Name: "refused"})
		wantShortOfMemory(t, "create", err, mem)
		if _, err := c.Get(ctx, "refused"); !sandbox.IsCode(err, sandbox.CodeNotFound) {
			t.Errorf("the refused sandbox: Get = %v; want not_found", err)
		}
		if after, err := d.RuntimeSandboxes(); err != nil || !slices.Equal(after, runtimeBefore) {
			t.Errorf("the runtime's sandboxes after the refused create: %v, %v; want %v", after, err, runtimeBefore)
		}
		if after := instanceOnHost(t, d); !slices.Equal(after, hostBefore) {
			t.Errorf("the instance on the host after the refused create: %v; want %v", after, hostBefore)
		}

		_, err = c.Wake(ctx, "kept")
		wantShortOfMemory(t, "wake", err, mem)
		if sb, err := c.Get(ctx, "kept"); err != nil || sb.Status != sandbox.StatusSleeping {
			t.Errorf("after the refused wake: %+v, %v; want it asleep", sb, err)
		}

		d.Stop()
		d.Args = nil
		d.Start()
		c = d.Client()
		if sb, err := c.Wake(ctx, "kept"); err != nil || sb.Status != sandbox.StatusRunning {
			t.Fatalf("wake with the default reserve: %+v, %v", sb, err)
		}
		var note bytes.Buffer
		if err := c.ReadFile(ctx, "kept", "/tmp/note", &note); err != nil || note.String() != "still here" {
			t.Errorf("the sleeping sandbox's file after the refused wake: %q, %v", note.String(), err)
		}
		if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "refused"}); err != nil {
			t.Errorf("create with the default reserve: %v", err)
		}
	})
}

// wantShortOfMemory fails t unless err is the refusal of a start for
// memory on a host of mem: unavailable, with the resource, the host's
// total as the limit, what was available then (within 2 GiB of mem's)
// as free, and as needed more than free (the reserve is the total).
func wantShortOfMemory(t *testing.T, call string, err error, mem hostusage.Memory) {
	t.Helper()
	var se *sandbox.Error
	if !errors.As(err, &se) || se.Code != sandbox.CodeUnavailable {
		t.Fatalf("%s short of memory: %v; want unavailable", call, err)
	}
	free, _ := se.Number("free")
	needed, _ := se.Number("needed")
	limit, _ := se.Number("limit")
	availMiB := mem.Available >> 20
	if se.Details["resource"] != "MiB of memory" || limit != mem.Total>>20 || free < availMiB-2048 || free > availMiB+2048 || needed <= free {
		t.Errorf("%s short of memory: %+v; want resource %q, limit %d, free about %d and needed above it", call, se, "MiB of memory", mem.Total>>20, availMiB)
	}
}

// instanceOnHost lists, sorted, what of d's instance is on the host
// (daemonproc.Leftovers: processes, mounts, network objects, and cgroups
// in every hierarchy).
func instanceOnHost(t *testing.T, d *daemon) []string {
	t.Helper()
	names, err := d.Names()
	if err != nil {
		t.Fatal(err)
	}
	left := daemonproc.Leftovers(t, names, d.DataDir)
	slices.Sort(left)
	return left
}
