package e2e_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/mcptest"
)

// unschedulable says whether Node name is cordoned.
func (f *kubeFleet) unschedulable(t *testing.T, ctx context.Context, name string) bool {
	t.Helper()
	n, err := f.k8s.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Spec.Unschedulable
}

// waitPodOn waits until the Pod ns/name stands for sandbox id and is
// bound to node.
func (f *kubeFleet) waitPodOn(t *testing.T, ctx context.Context, ns, name, id, node string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pod, err := f.k8s.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && pod.Spec.NodeName == node && pod.Annotations["hearth.dev/id"] == id && pod.DeletionTimestamp == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s of sandbox %s is not on %s 30 s on: %+v, %v", ns, name, id, node, pod, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestKubeDrain: `hearth node cordon` keeps new sandboxes off a node;
// `hearth node drain hn0` through a control plane cordons hn0 and moves
// its sandboxes to hn1, each with its files and checkpoints, its Pod
// following it: a sleeping one stays asleep, a running one runs again
// there, a moved checkpoint restores there. hn0 keeps nothing of them,
// and the next create lands on hn1. A sandbox's memory checkpoint moves
// with it (sealed as it is at rest): restored on hn1, the process it
// holds resumes with the value only its memory had; and so does a
// running sandbox's process, kept across the drain by a memory checkpoint
// the drain takes, moves, restores and deletes. Uncordon opens hn0 again.
func TestKubeDrain(t *testing.T) {
	f := newKubeFleet(t, 1, "", "")
	ctx := ctxT(t)
	cp := f.planes[0]
	if out, stderr, code := cp.CLI("", "node", "cordon", "hn1"); code != 0 || !f.unschedulable(t, ctx, "hn1") {
		t.Fatalf("hearth node cordon hn1 = %d, %q, %q; cordoned %v", code, out, stderr, f.unschedulable(t, ctx, "hn1"))
	}
	time.Sleep(time.Second) // kube-scheduler learns of the cordon through its informer
	ids := map[string]string{}
	for _, name := range []string{"asleep", "awake", "kept", "checked"} {
		sb, _, err := cp.Client().Create(ctx, sandbox.CreateRequest{Name: name})
		if err != nil || sb.Node != "hn0" {
			t.Fatalf("create %s with hn1 cordoned = node %q, %v; want hn0", name, sb.Node, err)
		}
		ids[name] = sb.ID
		cp.sh(ctx, name, "echo "+name+" files > /home/sandbox/mine.txt")
	}
	if _, err := cp.Client().Sleep(ctx, "asleep"); err != nil {
		t.Fatal(err)
	}
	held := memoryProcess(t, ctx, cp, "kept")
	awakeHeld := memoryProcess(t, ctx, cp, "awake")
	memCk, err := cp.Client().Checkpoint(ctx, "kept", sandbox.CheckpointRequest{Label: "with memory", Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	ck, err := cp.Client().Checkpoint(ctx, "checked", sandbox.CheckpointRequest{Label: "moves"})
	if err != nil {
		t.Fatal(err)
	}
	cp.sh(ctx, "checked", "echo later > /home/sandbox/mine.txt")
	if out, stderr, code := cp.CLI("", "node", "uncordon", "hn1"); code != 0 || f.unschedulable(t, ctx, "hn1") {
		t.Fatalf("hearth node uncordon hn1 = %d, %q, %q", code, out, stderr)
	}

	out, stderr, code := cp.CLI("", "node", "drain", "hn0")
	t.Logf("hearth node drain hn0:\n%s%s", out, stderr)
	if code != 0 {
		t.Errorf("hearth node drain hn0 = exit %d; want every sandbox moved", code)
	}
	if !f.unschedulable(t, ctx, "hn0") {
		t.Error("hn0 is not cordoned after the drain")
	}
	// The sleeping one's Pod gives back its CPU on hn1 too.
	f.waitPodCPU(t, ctx, "hearth-system", "asleep", 1, false)
	for name, want := range map[string]sandbox.Status{"asleep": sandbox.StatusSleeping, "awake": sandbox.StatusRunning, "checked": sandbox.StatusRunning, "kept": sandbox.StatusRunning} {
		sb, err := cp.Client().Get(ctx, name)
		if err != nil || sb.Node != "hn1" || sb.Status != want {
			t.Errorf("%s after the drain = %s on %q, %v; want %s on hn1", name, sb.Status, sb.Node, err, want)
		}
		f.waitPodOn(t, ctx, "hearth-system", name, ids[name], "hn1")
		if hasRoot(t, f.nodes[0], ids[name]) || !hasRoot(t, f.nodes[1], ids[name]) {
			t.Errorf("%s's root: on hn0 %v, on hn1 %v; want on hn1 only", name, hasRoot(t, f.nodes[0], ids[name]), hasRoot(t, f.nodes[1], ids[name]))
		}
		want := name + " files\n"
		if name == "checked" {
			want = "later\n"
		}
		if got := cp.sh(ctx, name, "cat /home/sandbox/mine.txt"); got != want {
			t.Errorf("%s's file after the drain = %q, want %q", name, got, want)
		}
	}
	// awake's process moved with it, resumed from the drain's memory
	// checkpoint, which is gone again.
	if !drainedLine(out, "awake", "kept") {
		t.Errorf("drain's line for awake does not say its processes were kept:\n%s", out)
	}
	cp.sh(ctx, "awake", "rm -f /tmp/v") // only the live process writes it again
	if got := waitFile(t, ctx, cp, "awake", "/tmp/v"); got != awakeHeld {
		t.Errorf("awake's process after the drain writes %q; want %q, the value its memory held on hn0", got, awakeHeld)
	}
	if cks, err := cp.Client().ListCheckpoints(ctx, "awake"); err != nil || len(cks) != 0 {
		t.Errorf("awake's checkpoints after the drain = %+v, %v; want none (the drain's own is deleted)", cks, err)
	}
	// Its checkpoint moved with it: restored on hn1.
	if _, err := cp.Client().Restore(ctx, "checked", ck.ID); err != nil {
		t.Fatalf("restore of checked's moved checkpoint = %v", err)
	}
	if got := cp.sh(ctx, "checked", "cat /home/sandbox/mine.txt"); got != "checked files\n" {
		t.Errorf("checked's file after restoring its moved checkpoint = %q", got)
	}
	f.waitPodRunning(t, ctx, "hearth-system", "asleep", "hn1") // woken by the read
	// kept's memory checkpoint moved with it: restored on hn1, its
	// process resumes with the value it held.
	if sb, err := cp.Client().Restore(ctx, "kept", memCk.ID); err != nil || !strings.HasSuffix(sb.Reason, "with its processes") || sb.Node != "hn1" {
		t.Fatalf("restore of kept's moved memory checkpoint = %q on %q, %v; want restored with its processes on hn1", sb.Reason, sb.Node, err)
	}
	cp.sh(ctx, "kept", "rm -f /tmp/v") // only the live process writes it again
	if got := waitFile(t, ctx, cp, "kept", "/tmp/v"); got != held {
		t.Errorf("the process restored on hn1 writes %q; want %q, the value its memory held", got, held)
	}
	if hasSnapshot(t, f.nodes[0], "ck-"+memCk.ID) {
		t.Error("hn0 kept the moved memory checkpoint's snapshot")
	}
	if sb, _, err := cp.Client().Create(ctx, sandbox.CreateRequest{Name: "after"}); err != nil || sb.Node != "hn1" {
		t.Errorf("create after the drain = node %q, %v; want hn1", sb.Node, err)
	}
	if _, _, code := cp.CLI("", "node", "uncordon", "hn0"); code != 0 || f.unschedulable(t, ctx, "hn0") {
		t.Errorf("hearth node uncordon hn0 = %d; cordoned %v", code, f.unschedulable(t, ctx, "hn0"))
	}
	if _, _, code := cp.CLI("", "node", "cordon", "nope"); code == 0 {
		t.Error("hearth node cordon of a node that is not hearth's succeeded")
	}
}

// TestKubeWakeMoves: a sleeping sandbox woken after its node filled up
// (hn0, 2.1 CPUs: two small sandboxes took the room it and another gave
// back) moves to a node with room (hn1) with its files, and the exec that
// woke it, through the control plane, runs there; its Pod follows it. So
// does the other, woken by a file write, a call with a body, which the
// control plane sends again to hn1. A fork of a memory checkpoint on the
// full hn0 starts on hn1, its process resumed there.
func TestKubeWakeMoves(t *testing.T) {
	f := newKubeFleetOf(t, 1, fleetNode{args: []string{"--capacity", "cpu=2100m"}}, fleetNode{})
	ctx := ctxT(t)
	cp := f.planes[0]
	if _, stderr, code := cp.CLI("", "node", "cordon", "hn1"); code != 0 {
		t.Fatalf("hearth node cordon hn1: %s", stderr)
	}
	time.Sleep(time.Second) // kube-scheduler learns of the cordon through its informer
	sb, _, err := cp.Client().Create(ctx, sandbox.CreateRequest{Name: "sleeper"})
	if err != nil || sb.Node != "hn0" {
		t.Fatalf("create sleeper = node %q, %v; want hn0", sb.Node, err)
	}
	writer, _, err := cp.Client().Create(ctx, sandbox.CreateRequest{Name: "writer"})
	if err != nil || writer.Node != "hn0" {
		t.Fatalf("create writer = node %q, %v; want hn0", writer.Node, err)
	}
	for _, name := range []string{"sleeper", "writer"} {
		cp.sh(ctx, name, "echo written on hn0 > /home/sandbox/mine.txt")
		if _, err := cp.Client().Sleep(ctx, name); err != nil {
			t.Fatal(err)
		}
		f.waitPodCPU(t, ctx, "hearth-system", name, 1, false)
	}
	for _, name := range []string{"fill-1", "fill-2"} {
		if got, _, err := cp.Client().Create(ctx, sandbox.CreateRequest{Name: name}); err != nil || got.Node != "hn0" {
			t.Fatalf("create %s = node %q, %v; want hn0, in the room sleeper gave back", name, got.Node, err)
		}
	}
	if _, stderr, code := cp.CLI("", "node", "uncordon", "hn1"); code != 0 {
		t.Fatalf("hearth node uncordon hn1: %s", stderr)
	}
	if got := cp.sh(ctx, "sleeper", "cat /home/sandbox/mine.txt"); got != "written on hn0\n" {
		t.Errorf("exec through the control plane on the woken sandbox = %q", got)
	}
	if got, err := cp.Client().Get(ctx, "sleeper"); err != nil || got.Node != "hn1" || got.Status != sandbox.StatusRunning {
		t.Errorf("sleeper after its wake = %s on %q, %v; want running on hn1", got.Status, got.Node, err)
	}
	f.waitPodOn(t, ctx, "hearth-system", "sleeper", sb.ID, "hn1")
	if hasRoot(t, f.nodes[0], sb.ID) {
		t.Error("hn0 kept the moved sandbox's root")
	}
	// A body larger than the control plane keeps to send again: it wakes
	// the sandbox ahead of the call, which then goes to the new node.
	big := strings.Repeat("x", 2<<20) + "\nwritten on hn1\n"
	if _, err := cp.Client().WriteFile(ctx, "writer", sandbox.WriteRequest{Path: "/home/sandbox/new.txt"}, strings.NewReader(big)); err != nil {
		t.Errorf("a 2 MiB file write through the control plane that woke writer on the full hn0 = %v; want it written on hn1", err)
	}
	if got, want := cp.sh(ctx, "writer", "cat /home/sandbox/mine.txt; tail -n 1 /home/sandbox/new.txt; wc -c < /home/sandbox/new.txt"), fmt.Sprintf("written on hn0\nwritten on hn1\n%d\n", len(big)); got != want {
		t.Errorf("writer's files after its move = %q, want %q", got, want)
	}
	if got, err := cp.Client().Get(ctx, "writer"); err != nil || got.Node != "hn1" {
		t.Errorf("writer after its wake is on %q, %v; want hn1", got.Node, err)
	}
	for _, name := range []string{"fill-1", "fill-2"} {
		if node := cp.sandboxNode(t, ctx, name); node != "hn0" {
			t.Errorf("%s is on %s after the move, want hn0", name, node)
		}
	}

	// A fork of a sandbox on the full hn0 starts on hn1, from the
	// checkpoint's files and, the checkpoint holding memory, with its
	// processes: the memory image follows the fork's root, and the
	// process resumes there with the value only its memory had. hn0
	// keeps no root of the fork, hn1 no copy of the image.
	cp.sh(ctx, "fill-1", "echo at the checkpoint > /home/sandbox/ck.txt")
	forkHeld := memoryProcess(t, ctx, cp, "fill-1")
	ck, err := cp.Client().Checkpoint(ctx, "fill-1", sandbox.CheckpointRequest{Memory: true})
	if err != nil || !ck.Memory {
		t.Fatalf("memory checkpoint of fill-1 = %+v, %v", ck, err)
	}
	cp.sh(ctx, "fill-1", "pkill -f '[o]s.urandom'; echo after it > /home/sandbox/ck.txt; rm -f /tmp/v")
	twin, err := cp.Client().Fork(ctx, "fill-1", ck.ID, "twin")
	if err != nil || twin.Node != "hn1" || twin.Status != sandbox.StatusRunning || !strings.HasSuffix(twin.Reason, "with its processes") {
		t.Fatalf("fork on the full hn0 = %s on %q (%q), %v; want running on hn1, with its processes", twin.Status, twin.Node, twin.Reason, err)
	}
	if got := cp.sh(ctx, "twin", "cat /home/sandbox/ck.txt; rm /tmp/v"); got != "at the checkpoint\n" {
		t.Errorf("the fork's ck.txt through the control plane = %q; want the checkpoint's", got)
	}
	if got := waitFile(t, ctx, cp, "twin", "/tmp/v"); got != forkHeld {
		t.Errorf("the fork's process on hn1 writes %q; want %q, the value its memory held on hn0", got, forkHeld)
	}
	f.waitPodOn(t, ctx, "hearth-system", "twin", twin.ID, "hn1")
	if hasRoot(t, f.nodes[0], twin.ID) {
		t.Error("hn0 kept a root of the fork hn1 runs")
	}
	if _, err := os.Stat(filepath.Join(f.nodes[1].DataDir, "oci", "runsc", "memory", ck.ID)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("hn1 kept its copy of the fork's memory image: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.nodes[0].DataDir, "oci", "runsc", "memory", ck.ID)); err != nil {
		t.Errorf("hn0 lost the checkpoint's memory image: %v", err)
	}

	// A restore of a sleeping sandbox on the full hn0 moves it, with its
	// checkpoint, to hn1, and the control plane sends the restore after
	// it.
	cp.sh(ctx, "fill-2", "echo at the checkpoint > /home/sandbox/two.txt")
	ck2, err := cp.Client().Checkpoint(ctx, "fill-2", sandbox.CheckpointRequest{})
	if err != nil {
		t.Fatal(err)
	}
	cp.sh(ctx, "fill-2", "echo after it > /home/sandbox/two.txt")
	if _, stderr, code := cp.CLI("", "node", "cordon", "hn1"); code != 0 {
		t.Fatalf("hearth node cordon hn1: %s", stderr)
	}
	if _, err := cp.Client().Sleep(ctx, "fill-2"); err != nil {
		t.Fatal(err)
	}
	f.waitPodCPU(t, ctx, "hearth-system", "fill-2", 1, false)
	time.Sleep(time.Second) // kube-scheduler learns of the cordon through its informer
	if got, _, err := cp.Client().Create(ctx, sandbox.CreateRequest{Name: "fill-3"}); err != nil || got.Node != "hn0" {
		t.Fatalf("create fill-3 = node %q, %v; want hn0, in the room fill-2 gave back", got.Node, err)
	}
	if _, stderr, code := cp.CLI("", "node", "uncordon", "hn1"); code != 0 {
		t.Fatalf("hearth node uncordon hn1: %s", stderr)
	}
	restored, err := cp.Client().Restore(ctx, "fill-2", ck2.ID)
	if err != nil || restored.Node != "hn1" || restored.Status != sandbox.StatusRunning {
		t.Fatalf("restore of fill-2 on the full hn0 = %s on %q, %v; want running on hn1", restored.Status, restored.Node, err)
	}
	if got := cp.sh(ctx, "fill-2", "cat /home/sandbox/two.txt"); got != "at the checkpoint\n" {
		t.Errorf("fill-2's two.txt after the restore = %q; want the checkpoint's", got)
	}
	if hasRoot(t, f.nodes[0], restored.ID) {
		t.Error("hn0 kept the root of fill-2, which moved to hn1")
	}

	// Images asked of the control plane are made on a node: one from
	// fill-1's checkpoint on fill-1's node, hn0; a build on the first
	// node by name, hn0 too. hn1 fetches each when a create through the
	// control plane lands there.
	if _, err := cp.Client().Images().Create(ctx, "from-fill", "fill-1", ck.ID); err != nil {
		t.Fatalf("image from fill-1's checkpoint through the control plane: %v", err)
	}
	var bctx bytes.Buffer
	tw := tar.NewWriter(&bctx)
	const built = "built through the control plane\n"
	if err := tw.WriteHeader(&tar.Header{Name: "built.txt", Mode: 0o644, Size: int64(len(built))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte(built)); err != nil || tw.Close() != nil {
		t.Fatal(err)
	}
	if _, err := cp.Client().Images().Build(ctx, "built", strings.NewReader("FROM default\nCOPY built.txt /home/sandbox/built.txt\n"), &bctx, client.BuildOptions{}); err != nil {
		t.Fatalf("build through the control plane: %v", err)
	}
	// An image pull through the control plane's MCP door goes to a node
	// too: the registry's refusal is the node's answer.
	cs := mcptest.Connect(t, ctx, cp.URL+"/mcp", cp.Token, nil)
	if res := callTool(t, cs, "image_pull", map[string]any{"ref": "127.0.0.1:1/none:1"}, nil); !res.IsError || !strings.Contains(mcpText(res), "dial tcp 127.0.0.1:1") {
		t.Errorf("image_pull through the control plane = error %v, %s; want the node's failure to reach 127.0.0.1:1", res.IsError, mcpText(res))
	}
	for _, c := range []struct{ image, file, want string }{
		{"from-fill", "ck.txt", "at the checkpoint\n"},
		{"built", "built.txt", built},
	} {
		sb, _, err := cp.Client().Create(ctx, sandbox.CreateRequest{Name: "of-" + c.image, Image: c.image})
		if err != nil || sb.Node != "hn1" {
			t.Fatalf("create of image %s, which only hn0 holds, with hn0 full = node %q, %v; want hn1", c.image, sb.Node, err)
		}
		if got := cp.sh(ctx, "of-"+c.image, "cat /home/sandbox/"+c.file); got != c.want {
			t.Errorf("%s in a sandbox of image %s, which hn1 fetched = %q, want %q", c.file, c.image, got, c.want)
		}
	}
}

// memoryProcess starts in sandbox name, through d, a process holding a
// random value only in its memory, which it writes to /tmp/v every 50 ms,
// and returns the value once written.
func memoryProcess(t *testing.T, ctx context.Context, d *daemon, name string) string {
	t.Helper()
	d.sh(ctx, name, `python3 -c 'import os, time
v = os.urandom(8).hex()
while True:
    open("/tmp/v.tmp", "w").write(v); os.replace("/tmp/v.tmp", "/tmp/v"); time.sleep(0.05)' >/dev/null 2>&1 &`)
	return waitFile(t, ctx, d, name, "/tmp/v")
}

// drainedLine says whether drain's table has a line for sandbox name
// whose processes column is processes.
func drainedLine(out, name, processes string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && strings.HasSuffix("/"+f[0], "/"+name) {
			return f[3] == processes
		}
	}
	return false
}

// waitFile returns what file path of sandbox name holds once it holds
// something, waiting up to 10 s.
func waitFile(t *testing.T, ctx context.Context, d *daemon, name, path string) string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got := d.sh(ctx, name, "cat "+path+" 2>/dev/null || true"); got != "" {
			return got
		}
	}
	t.Fatalf("%s of %s stayed empty for 10 s", path, name)
	return ""
}
