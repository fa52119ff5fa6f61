package e2e_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
	_ "modernc.org/sqlite" // the daemon's database, read beside it
)

// TestKillDuringRestore SIGKILLs the real daemon at a random moment of a
// restore, again and again, and checks after each restart that the sandbox
// is whole: usable, and holding either the old content or the checkpoint's,
// with its head agreeing. (lifecycle's crash tests kill at every step with
// fakes; this one does it with btrfs and the OCI runtime.)
func TestKillDuringRestore(t *testing.T) {
	requireDaemon(t)
	d := newDaemon(t, bins.Runtimes[0])
	ctx := ctxT(t)
	c := d.Client()
	if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "crash"}); err != nil {
		t.Fatal(err)
	}
	d.sh(ctx, "crash", "echo saved > data.txt")
	ck, err := c.Checkpoint(ctx, "crash", sandbox.CheckpointRequest{Label: "saved"})
	if err != nil {
		t.Fatal(err)
	}
	r := crashRand(t)
	for round := range 6 {
		d.sh(ctx, "crash", "echo changed > data.txt")
		restoreErr := d.killDuring(ctx, time.Duration(r.IntN(120))*time.Millisecond, func(ctx context.Context, c *client.Client) error {
			_, err := c.Restore(ctx, "crash", ck.ID)
			return err
		})
		c = d.Client()
		d.wantWhole(ctx)
		sb, err := c.Get(ctx, "crash")
		if err != nil {
			t.Fatalf("round %d: Get after the kill = %v", round, err)
		}
		got := d.sh(ctx, "crash", "cat data.txt")
		switch got {
		case "saved\n":
			if sb.Head != ck.ID {
				t.Fatalf("round %d: content is the checkpoint's but head = %q", round, sb.Head)
			}
		case "changed\n":
			// The restore did not happen; the old content is intact.
			if restoreErr == nil {
				t.Fatalf("round %d: the daemon acknowledged the restore, but after the kill data.txt holds the old content", round)
			}
		default:
			t.Fatalf("round %d: after the kill data.txt = %q; want the old content or the checkpoint's", round, got)
		}
		if list, err := c.ListCheckpoints(ctx, "crash"); err != nil || len(list) != 1 || list[0].ID != ck.ID {
			t.Fatalf("round %d: checkpoints after the kill = %+v, %v; want the one checkpoint", round, list, err)
		}
		t.Logf("round %d: killed after the restore began; found %q, status %s (%s)", round, got, sb.Status, sb.Reason)
	}
}

// TestKillDuringCheckpointAndSleep SIGKILLs the real daemon at a random
// moment of a checkpoint, then of a sleep, and checks after each restart
// that every listed checkpoint is whole (restoring the newest brings back
// its content) and that the sandbox answers.
func TestKillDuringCheckpointAndSleep(t *testing.T) {
	requireDaemon(t)
	d := newDaemon(t, bins.Runtimes[0])
	ctx := ctxT(t)
	c := d.Client()
	if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "crash"}); err != nil {
		t.Fatal(err)
	}
	r := crashRand(t)
	for round := range 5 {
		want := fmt.Sprintf("round %d\n", round)
		d.sh(ctx, "crash", "echo 'round "+fmt.Sprint(round)+"' > data.txt")
		before, err := c.ListCheckpoints(ctx, "crash")
		if err != nil {
			t.Fatal(err)
		}
		ckErr := d.killDuring(ctx, time.Duration(r.IntN(150))*time.Millisecond, func(ctx context.Context, c *client.Client) error {
			_, err := c.Checkpoint(ctx, "crash", sandbox.CheckpointRequest{Label: fmt.Sprintf("round %d", round)})
			return err
		})
		c = d.Client()
		d.wantWhole(ctx)
		after, err := c.ListCheckpoints(ctx, "crash")
		if err != nil || len(after) < len(before) || len(after) > len(before)+1 || ckErr == nil && len(after) == len(before) {
			t.Fatalf("round %d: checkpoints %d before the kill, %+v (%v) after, the checkpoint call returned %v; want one more, or the same if the call failed", round, len(before), after, err, ckErr)
		}
		if len(after) == len(before)+1 {
			newest := after[len(after)-1]
			d.sh(ctx, "crash", "echo scribble > data.txt")
			if _, err := c.Restore(ctx, "crash", newest.ID); err != nil {
				t.Fatalf("round %d: restore of the checkpoint taken as the daemon died = %v", round, err)
			}
			if got := d.sh(ctx, "crash", "cat data.txt"); got != want {
				t.Fatalf("round %d: the checkpoint taken as the daemon died holds %q, want %q", round, got, want)
			}
		}
		sleepErr := d.killDuring(ctx, time.Duration(r.IntN(150))*time.Millisecond, func(ctx context.Context, c *client.Client) error {
			_, err := c.Sleep(ctx, "crash")
			return err
		})
		c = d.Client()
		d.wantWhole(ctx)
		sb, err := c.Get(ctx, "crash")
		if err != nil || sb.Status != sandbox.StatusRunning && sb.Status != sandbox.StatusSleeping || sleepErr == nil && sb.Status != sandbox.StatusSleeping {
			t.Fatalf("round %d: after a kill during sleep (which returned %v): %+v, %v; want sleeping, or running if the sleep failed", round, sleepErr, sb, err)
		}
		d.sh(ctx, "crash", "true")
		t.Logf("round %d: %d → %d checkpoints; after the sleep kill: %s (%s)", round, len(before), len(after), sb.Status, sb.Reason)
	}
}

// TestKillDuringMemoryCheckpoint: the daemon killed at a random moment of
// a memory checkpoint (gVisor's: the agent quiet, the sandbox paused, the
// image being written) leaves the sandbox whole: after the restart it
// runs and answers, with one checkpoint more or none, and a checkpoint
// taken as the daemon died restores (with its processes or, its image
// unfinished, afresh) to the file it saw. Two more rounds kill it while
// runsc writes the image's plaintext into its tmpfs and while the driver
// seals it into <key>.tmp (in the background, the call often returned):
// after each restart no half-written image, no tmpfs and no raised memory
// limit is left (wantWholeImages), and a checkpoint whose call returned
// restores with its processes.
func TestKillDuringMemoryCheckpoint(t *testing.T) {
	d := runscDaemon(t)
	ctx := ctxT(t)
	c := d.Client()
	if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "crash"}); err != nil {
		t.Fatal(err)
	}
	r := crashRand(t)
	memory := filepath.Join(d.DataDir, "oci", "runsc", "memory")
	writing := func(pattern string) func() bool {
		return func() bool { m, _ := filepath.Glob(filepath.Join(memory, pattern)); return len(m) > 0 }
	}
	// A process holding 64 MiB makes the image take a while to write.
	const holder = `[ -e /proc/"$(cat /tmp/holder.pid 2>/dev/null)" ] || {
python3 -c 'import time; b = bytearray(64 << 20)
for i in range(0, len(b), 4096): b[i] = 1
time.sleep(100000)' >/dev/null 2>&1 & echo $! > /tmp/holder.pid; sleep 1; }`
	for round := range 6 {
		want := fmt.Sprintf("round %d\n", round)
		d.sh(ctx, "crash", "echo 'round "+fmt.Sprint(round)+"' > data.txt; "+holder)
		before, err := c.ListCheckpoints(ctx, "crash")
		if err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		delay := time.Duration(r.IntN(200)) * time.Millisecond
		when := map[int]func() bool{4: writing("*.save-*"), 5: writing("*.tmp")}[round]
		if when == nil {
			when = func() bool { return time.Since(began) >= delay }
		}
		ckErr := d.killWhen(ctx, when, func(ctx context.Context, c *client.Client) error {
			_, err := c.Checkpoint(ctx, "crash", sandbox.CheckpointRequest{Memory: true})
			return err
		})
		c = d.Client()
		d.wantWhole(ctx)
		if got := d.sh(ctx, "crash", "cat data.txt"); got != want {
			t.Fatalf("round %d: after the kill the sandbox holds %q, want %q", round, got, want)
		}
		after, err := c.ListCheckpoints(ctx, "crash")
		if err != nil || len(after) < len(before) || len(after) > len(before)+1 || ckErr == nil && len(after) == len(before) {
			t.Fatalf("round %d: checkpoints %d before the kill, %+v (%v) after, the checkpoint call returned %v", round, len(before), after, err, ckErr)
		}
		if len(after) == len(before)+1 {
			d.sh(ctx, "crash", "echo scribble > data.txt")
			sb, err := c.Restore(ctx, "crash", after[len(after)-1].ID)
			if err != nil {
				t.Fatalf("round %d: restore of the checkpoint taken as the daemon died = %v", round, err)
			}
			if got := d.sh(ctx, "crash", "cat data.txt"); got != want {
				t.Fatalf("round %d: the checkpoint taken as the daemon died holds %q, want %q", round, got, want)
			}
			if ckErr == nil && !strings.Contains(sb.Reason, "with its processes") {
				t.Errorf("round %d: the checkpoint call returned before the kill, yet its restore says %q, want its processes back", round, sb.Reason)
			}
			t.Logf("round %d: %s", round, sb.Reason)
		} else {
			t.Logf("round %d: no checkpoint (the call returned %v)", round, ckErr)
		}
	}
}

// wantWholeImages wants the runtime's memory images whole after a
// restart: no half-written image (<key>.tmp), no tmpfs of an image's
// plaintext mounted (nor its mount point), images of the checkpoints that
// exist only, each sealed (a key and sealed files, no plaintext file), and
// no memory limit left raised.
func (d *daemon) wantWholeImages(checkpoints map[string]bool) {
	t := d.T
	t.Helper()
	stateDir := filepath.Join(d.DataDir, "oci", d.Runtime)
	entries, err := os.ReadDir(filepath.Join(stateDir, "memory"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !checkpoints[e.Name()] {
			t.Errorf("memory image %s: no checkpoint owns it (half written, a tmpfs's mount point, or an orphan)", e.Name())
			continue
		}
		files, _ := os.ReadDir(filepath.Join(stateDir, "memory", e.Name()))
		for _, f := range files {
			if f.Name() != "key" && !strings.HasSuffix(f.Name(), ".sealed") {
				t.Errorf("memory image %s holds %s, which is not sealed", e.Name(), f.Name())
			}
		}
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(mounts)) {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], filepath.Join(stateDir, "memory")+"/") {
			t.Errorf("a memory image's tmpfs is still mounted: %s", f[4])
		}
	}
	if raised, _ := filepath.Glob(filepath.Join(stateDir, "sandboxes", "*", "memory-raised")); len(raised) > 0 {
		t.Errorf("memory limits still raised: %v", raised)
	}
}

// crashRand returns the source of a crash test's kill delays: seeded from
// $HEARTH_CRASH_SEED, to replay the delays of a run that failed, else at
// random. It logs the seed.
func crashRand(t *testing.T) *rand.Rand {
	t.Helper()
	seed := rand.Uint64()
	if s := os.Getenv("HEARTH_CRASH_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("HEARTH_CRASH_SEED=%q: %v", s, err)
		}
	}
	t.Logf("kill delays from seed %d (HEARTH_CRASH_SEED=%d replays them)", seed, seed)
	return rand.New(rand.NewPCG(seed, seed))
}

// killDelays returns a kill delay per round: a random moment in each of
// rounds equal slices of span, in random order, so that the rounds
// together cover all of span, and the first ones already most of it.
func killDelays(r *rand.Rand, rounds int, span time.Duration) []time.Duration {
	delays := make([]time.Duration, rounds)
	for i, slice := range r.Perm(rounds) {
		delays[i] = time.Duration((float64(slice) + r.Float64()) / float64(rounds) * float64(span))
	}
	return delays
}

// killDuring runs op against the daemon, SIGKILLs the daemon delay after op
// began, waits for op to give up, and starts the daemon again on the same
// data dir. It returns op's error: nil means the daemon had acknowledged op
// before it died.
func (d *daemon) killDuring(ctx context.Context, delay time.Duration, op func(context.Context, *client.Client) error) error {
	d.T.Helper()
	began := time.Now()
	return d.killWhen(ctx, func() bool { return time.Since(began) >= delay }, op)
}

// killWhen is killDuring with the kill as soon as when says so (it is
// polled every millisecond), or once op has returned.
func (d *daemon) killWhen(ctx context.Context, when func() bool, op func(context.Context, *client.Client) error) error {
	d.T.Helper()
	c := d.Client()
	done := make(chan error, 1)
	go func() {
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		done <- op(octx, c)
	}()
	var err error
	returned := false
	for !when() {
		select {
		case err = <-done:
			returned = true
		case <-time.After(time.Millisecond):
			continue
		}
		break
	}
	if returned {
		d.T.Logf("the operation returned (%v) before the moment to kill came", err)
	}
	d.Kill()
	if !returned {
		err = <-done // fails or succeeds; the daemon is gone either way
	}
	d.Start()
	return err
}

// imageLayerKeys are the layer keys the catalog's image versions name
// (their layers and tops), read from the daemon's database.
func imageLayerKeys(ctx context.Context, t testing.TB, db *sql.DB) map[string]bool {
	t.Helper()
	rows, err := db.QueryContext(ctx, `SELECT layers FROM images`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	keys := map[string]bool{}
	for rows.Next() {
		var text string
		var layers []string
		if err := rows.Scan(&text); err != nil || json.Unmarshal([]byte(text), &layers) != nil {
			t.Fatalf("an image's layers = %q, %v", text, err)
		}
		for _, k := range layers {
			keys[k] = true
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// sh runs script in the sandbox name and returns its output, failing the
// test, with the sandbox as it then is, unless it exits 0.
func (d *daemon) sh(ctx context.Context, name, script string) string {
	d.T.Helper()
	c := d.Client()
	var out bytes.Buffer
	res, err := c.Exec(ctx, name, sandbox.ExecRequest{Shell: script}, nil, &out, &out)
	if err != nil || res.ExitCode != 0 {
		sb, gerr := c.Get(ctx, name)
		d.T.Fatalf("exec %q in %s = %+v, %v, %q; the sandbox then: %+v, %v", script, name, res, err, out.String(), sb, gerr)
	}
	return out.String()
}

// wantWhole wants the daemon's host to hold whole sandboxes only, as
// lifecycle's crash tests want of their fakes: no sandbox still creating;
// no checkpoint row whose sandbox row is gone; in the layer store, besides
// the image, a root for each sandbox and a snapshot for each checkpoint,
// no other, and no subvolume that no record names (nor a record without
// one); in the runtime, containers and sandbox directories of listed
// sandboxes only, and a running container under each sandbox that says
// running; and its memory images whole (wantWholeImages).
func (d *daemon) wantWhole(ctx context.Context) {
	t := d.T
	t.Helper()
	c := d.Client()
	list, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var wantRoots, wantCks []string
	owned, checkpoints := map[string]bool{}, map[string]bool{}
	for _, sb := range list {
		owned[sb.ID] = true
		wantRoots = append(wantRoots, "sb-"+sb.ID)
		if sb.Status == sandbox.StatusCreating {
			t.Errorf("%s is still creating after the restart: %+v", sb.Name, sb)
		}
		cks, err := c.ListCheckpoints(ctx, sb.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, ck := range cks {
			wantCks = append(wantCks, "ck-"+ck.ID)
			checkpoints[ck.ID] = true
		}
	}
	d.wantWholeImages(checkpoints)
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: filepath.Join(d.DataDir, "hearth.db"), RawQuery: "_query_only=on&_busy_timeout=5000"}).String())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var orphans string
	if err := db.QueryRowContext(ctx, `SELECT coalesce(group_concat(id || ' of ' || sandbox_id, ', '), '') FROM checkpoints
		WHERE sandbox_id NOT IN (SELECT id FROM sandboxes)`).Scan(&orphans); err != nil {
		t.Fatal(err)
	}
	if orphans != "" {
		t.Errorf("the database holds checkpoint rows whose sandbox is gone: %s", orphans)
	}
	imageKeys := imageLayerKeys(ctx, t, db)

	// The btrfs store keeps meta/<key>, a symlink to its JSON record, and
	// snapshots/<id>, the subvolume the record names (see layers/btrfs.Store).
	layersDir := filepath.Join(d.DataDir, "layers")
	records, err := os.ReadDir(filepath.Join(layersDir, "meta"))
	if err != nil {
		t.Fatal(err)
	}
	var roots, cks []string
	recorded := map[string]bool{}
	for _, e := range records {
		target, err := os.Readlink(filepath.Join(layersDir, "meta", e.Name()))
		var rec struct {
			ID string `json:"id"`
		}
		if err != nil || json.Unmarshal([]byte(target), &rec) != nil || rec.ID == "" {
			t.Errorf("layer record %s = %q, %v; want a symlink to a JSON record", e.Name(), target, err)
			continue
		}
		recorded[rec.ID] = true
		if _, err := os.Stat(filepath.Join(layersDir, "snapshots", rec.ID)); err != nil {
			t.Errorf("the subvolume of layer %s: %v", e.Name(), err)
		}
		switch {
		case strings.HasPrefix(e.Name(), "sb-"):
			roots = append(roots, e.Name())
		case strings.HasPrefix(e.Name(), "ck-"):
			cks = append(cks, e.Name())
		case strings.HasPrefix(e.Name(), "step-"):
			// A build's cache, until the next start collects it.
		case !imageKeys[e.Name()]:
			t.Errorf("the layer store holds %s -> %s, which no image version names", e.Name(), target)
		}
	}
	subvols, err := os.ReadDir(filepath.Join(layersDir, "snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range subvols {
		if !recorded[e.Name()] {
			t.Errorf("the layer store holds subvolume %s, which no record names", e.Name())
		}
	}
	for _, set := range []struct {
		what      string
		got, want []string
	}{{"roots", roots, wantRoots}, {"checkpoint snapshots", cks, wantCks}} {
		slices.Sort(set.got)
		if slices.Sort(set.want); !slices.Equal(set.got, set.want) {
			t.Errorf("the layer store holds %s %q, the sandboxes %q", set.what, set.got, set.want)
		}
	}

	// The runtime: its containers under the driver's shared --root and
	// each sandbox's own, and the driver's directory per sandbox.
	stateDir := filepath.Join(d.DataDir, "oci", d.Runtime)
	runtimeRoots, _ := filepath.Glob(filepath.Join(stateDir, "sandboxes", "*", "runtime"))
	type container struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	var containers []container
	for _, root := range append(runtimeRoots, filepath.Join(stateDir, "root")) {
		out, err := exec.CommandContext(ctx, d.Runtime, "--root", root, "list", "--format", "json").Output()
		if err != nil {
			t.Fatalf("%s --root %s list: %v", d.Runtime, root, err)
		}
		var in []container
		if out = bytes.TrimSpace(out); len(out) > 0 {
			if err := json.Unmarshal(out, &in); err != nil {
				t.Fatalf("%s list: %v in %q", d.Runtime, err, out)
			}
		}
		containers = append(containers, in...)
	}
	runs := map[string]bool{}
	for _, ct := range containers {
		if !owned[ct.ID] {
			t.Errorf("the runtime holds container %s (%s), which no sandbox owns", ct.ID, ct.Status)
		}
		runs[ct.ID] = ct.Status == "running"
	}
	for _, sb := range list {
		if sb.Status == sandbox.StatusRunning && !runs[sb.ID] {
			t.Errorf("%s says running, but the runtime runs no container %s: %+v", sb.Name, sb.ID, containers)
		}
	}
	dirs, err := os.ReadDir(filepath.Join(stateDir, "sandboxes"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range dirs {
		if !owned[e.Name()] {
			t.Errorf("the runtime driver keeps %s, which no sandbox owns", filepath.Join(stateDir, "sandboxes", e.Name()))
		}
	}
}
