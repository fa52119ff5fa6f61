package e2e_test

import (
	"testing"

	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
)

// TestImageFetchedBetweenNodes: an image made on node A of a store is
// fetched by node B, layer by layer from A, when B first needs it: for a
// sandbox created through B, and for a sandbox of another such image
// moved to B. The node-only route that sends a layer refuses every caller
// but a node proving its credential.
func TestImageFetchedBetweenNodes(t *testing.T) {
	ds := sharedDaemons(t, 2)
	a, b := ds[0], ds[1]
	ctx := ctxT(t)
	image := func(name, content string) sandbox.Image {
		t.Helper()
		if _, _, err := a.Client().Create(ctx, sandbox.CreateRequest{Name: "maker-" + name}); err != nil {
			t.Fatal(err)
		}
		a.sh(ctx, "maker-"+name, "echo "+content+" > /home/sandbox/tool.conf")
		ck, err := a.Client().Checkpoint(ctx, "maker-"+name, sandbox.CheckpointRequest{})
		if err != nil {
			t.Fatal(err)
		}
		img, err := a.Client().Images().Create(ctx, name, "maker-"+name, ck.ID)
		if err != nil {
			t.Fatalf("image %s from a sandbox on a: %v", name, err)
		}
		return img
	}
	made := image("made-on-a", "made on a")
	top, err := node.TopKey(made.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if hasSnapshot(t, b, top) {
		t.Fatal("b holds the image made on a before anything needed it")
	}

	wantNodeOnly(t, ctx, a.Token, "GET", a.URL+"/v1/internal/layers/"+top, "")

	sb, _, err := b.Client().Create(ctx, sandbox.CreateRequest{Name: "user", Image: "made-on-a"})
	if err != nil || sb.Node != "n1" {
		t.Fatalf("create through b of an image made on a = node %q, %v; want it on b (n1)", sb.Node, err)
	}
	if got := b.sh(ctx, "user", "cat /home/sandbox/tool.conf"); got != "made on a\n" {
		t.Errorf("tool.conf in the sandbox on b = %q", got)
	}
	if !hasSnapshot(t, b, top) {
		t.Error("b does not hold the image it started a sandbox of")
	}

	moved := image("moved-to-b", "moved to b")
	if _, _, err := a.Client().Create(ctx, sandbox.CreateRequest{Name: "traveller", Image: "moved-to-b"}); err != nil {
		t.Fatal(err)
	}
	a.sh(ctx, "traveller", "echo written on a >> /home/sandbox/tool.conf")
	if _, err := a.Client().Sleep(ctx, "traveller"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Client().Move(ctx, "traveller", "n1"); err != nil {
		t.Fatalf("move to b of a sandbox of an image only a holds = %v", err)
	}
	if got := b.sh(ctx, "traveller", "cat /home/sandbox/tool.conf"); got != "moved to b\nwritten on a\n" {
		t.Errorf("tool.conf of the moved sandbox on b = %q", got)
	}
	if top, _ := node.TopKey(moved.Digest); !hasSnapshot(t, b, top) {
		t.Error("b does not hold the image of the sandbox moved to it")
	}
}
