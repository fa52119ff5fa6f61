package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/benchstat"
)

// subvolume is the host path of the layer-store snapshot key of d, and
// the key of its parent (a root's image).
func subvolume(b *testing.B, d *daemon, key string) (path, parent string) {
	b.Helper()
	target, err := os.Readlink(filepath.Join(d.DataDir, "layers", "meta", key))
	if err != nil {
		b.Fatal(err)
	}
	var rec struct {
		ID     string `json:"id"`
		Parent string `json:"parent"`
	}
	if err := json.Unmarshal([]byte(target), &rec); err != nil {
		b.Fatal(err)
	}
	return filepath.Join(d.DataDir, "layers", "snapshots", rec.ID), rec.Parent
}

// sendReceive times `btrfs send -p IMAGE SNAPSHOT | btrfs receive DIR`
// of a read-only snapshot of subvolume root against image, on the
// machine's own filesystem (the parent is there): the same bytes a move
// sends, without hearth; then to the end of a `sync -f` of what it
// received (a move is durable when it returns).
func sendReceive(b *testing.B, root, image string) (received, synced time.Duration) {
	b.Helper()
	stage, err := os.MkdirTemp(filepath.Dir(filepath.Dir(root)), "bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		exec.Command("sh", "-c", "btrfs subvolume delete "+stage+"/snap "+stage+"/recv/snap; rm -rf "+stage).Run()
	}()
	if out, err := exec.Command("btrfs", "subvolume", "snapshot", "-r", root, filepath.Join(stage, "snap")).CombinedOutput(); err != nil {
		b.Fatalf("snapshot: %v: %s", err, out)
	}
	os.Mkdir(filepath.Join(stage, "recv"), 0o700)
	start := time.Now()
	script := fmt.Sprintf("btrfs -q send -p %s %s/snap | btrfs -q receive %s/recv", image, stage, stage)
	if out, err := exec.Command("bash", "-c", "set -o pipefail; "+script).CombinedOutput(); err != nil {
		b.Fatalf("%s: %v: %s", script, err, out)
	}
	received = time.Since(start)
	if out, err := exec.Command("sync", "-f", filepath.Join(stage, "recv")).CombinedOutput(); err != nil {
		b.Fatalf("sync -f: %v: %s", err, out)
	}
	return received, time.Since(start)
}

// BenchmarkMove is moving a sleeping sandbox that wrote 1 GB of files to
// another node of a store, back and forth between two daemons (hearth
// move, asked of the node that has it: "move-"), against `btrfs send |
// btrfs receive` of the same root against the same image on one
// filesystem ("btrfs-send-receive-", and with a sync of what it received,
// "btrfs-send-receive-sync-"), alternating.
func BenchmarkMove(b *testing.B) {
	ds := pgDaemons(b, 2)
	ctx := context.Background()
	sb, _, err := ds[0].Client().Create(ctx, sandbox.CreateRequest{Name: "big", Size: "large"})
	if err != nil {
		b.Fatal(err)
	}
	ds[0].sh(ctx, "big", "mkdir -p /home/sandbox/data && for i in $(seq 16); do head -c 67108864 /dev/urandom > /home/sandbox/data/f$i; done; sync")
	if _, err := ds[0].Client().Sleep(ctx, "big"); err != nil {
		b.Fatal(err)
	}
	var moves, base, baseSynced []time.Duration
	at := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		root, image := subvolume(b, ds[at], "sb-"+sb.ID)
		imagePath, _ := subvolume(b, ds[at], image)
		received, synced := sendReceive(b, root, imagePath)
		base, baseSynced = append(base, received), append(baseSynced, synced)
		b.StartTimer()
		start := time.Now()
		if _, err := ds[at].Client().Move(ctx, "big", fmt.Sprintf("n%d", 1-at)); err != nil {
			b.Fatal(err)
		}
		moves = append(moves, time.Since(start))
		at = 1 - at
	}
	benchstat.Report(b, "move-", moves)
	benchstat.Report(b, "btrfs-send-receive-", base)
	benchstat.Report(b, "btrfs-send-receive-sync-", baseSynced)
}
