package e2e_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hearth/hearth/sandbox"
)

// TestTamperedMemoryImage (runsc): a memory image altered on the host's
// disk does not restore: the restore starts the sandbox afresh on the
// checkpoint's files, says so in its reason, and the daemon's log says
// why; the process the image held does not come back.
func TestTamperedMemoryImage(t *testing.T) {
	d := runscDaemon(t)
	ctx := ctxT(t)
	c := d.Client()
	sb, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "mem"})
	if err != nil {
		t.Fatal(err)
	}
	d.sh(ctx, "mem", "echo kept > data.txt; sleep 100000 >/dev/null 2>&1 &")
	// (The pattern does not match itself on grep's command line.)
	const sleepers = `grep -l '10000[0]' /proc/[0-9]*/cmdline 2>/dev/null | wc -l`
	if out := d.sh(ctx, "mem", sleepers); out != "1\n" {
		t.Fatalf("sleepers before the checkpoint: %q, want 1", out)
	}
	ck, err := c.Checkpoint(ctx, "mem", sandbox.CheckpointRequest{Memory: true})
	if err != nil || !ck.Memory {
		t.Fatalf("Checkpoint(memory) = %+v, %v", ck, err)
	}
	pages := filepath.Join(d.MemoryImage(ck.ID), "pages.img.sealed")
	f, err := os.OpenFile(pages, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, 100); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, 100); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, err := c.Restore(ctx, "mem", ck.ID)
	if err != nil || got.Status != sandbox.StatusRunning || !strings.Contains(got.Reason, "afresh") {
		t.Fatalf("Restore of a tampered image = %+v, %v; want running, started afresh", got, err)
	}
	if out := d.sh(ctx, "mem", "cat data.txt; "+sleepers); out != "kept\n0\n" {
		t.Errorf("after the restore the sandbox says %q, want its files and not its processes", out)
	}
	if log := d.Out.String(); !strings.Contains(log, "does not open") || !strings.Contains(log, sb.ID) {
		t.Errorf("the daemon's log does not say why the image of %s was not restored", sb.ID)
	}
}
