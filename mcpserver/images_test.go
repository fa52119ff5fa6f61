package mcpserver_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hearth/hearth/mcpserver"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/mcptest"
	"github.com/hearth/hearth/testutil/registry"
)

// TestImageTools pulls an image from a real registry with image_pull (its
// progress as notifications), finds it with image_list, and creates a
// sandbox from it; another tenant's agent sees none of it; a bad
// reference is an error result; the audit log names the image verbs.
func TestImageTools(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	ref := reg.Push(t, "tools:1.0", registry.Image(t, registry.Layer(t, compression.GZip, map[string]string{
		"etc/passwd":      "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":       "root:x:0:\n",
		"root/from-image": "yes\n",
	})))
	e := newEnv(t, mcpserver.Options{})
	e.d.TrustRegistry(t, reg.Host)
	var (
		mu       sync.Mutex
		messages []string
	)
	cs := e.connect(t, agentA1, func(p *mcp.ProgressNotificationParams) {
		mu.Lock()
		defer mu.Unlock()
		messages = append(messages, p.Message)
	})

	var ls struct {
		Images []struct{ Name, Source string }
	}
	mustCall(t, cs, "image_list", nil, &ls)
	if ls.Images == nil || len(ls.Images) != 0 {
		t.Fatalf("image_list before any pull = %+v; want an empty list", ls)
	}

	params := &mcp.CallToolParams{Name: "image_pull", Arguments: map[string]any{"ref": ref}}
	params.SetProgressToken("pull")
	res, err := cs.CallTool(context.Background(), params)
	if err != nil || res.IsError {
		t.Fatalf("image_pull(%s) = %v, %v", ref, text(res), err)
	}
	var pulled struct{ Name, Digest string }
	if err := mcptest.Decode(res, &pulled); err != nil || pulled.Name != ref || !strings.HasPrefix(pulled.Digest, "sha256:") {
		t.Fatalf("image_pull = %+v, %v", pulled, err)
	}
	// The client handles notifications concurrently with the result, so
	// the last ones may reach the handler just after the result did.
	var got []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		got = slices.Clone(messages)
		mu.Unlock()
		if len(got) > 0 && strings.HasPrefix(got[len(got)-1], "done ") || time.Now().After(deadline) {
			break
		}
	}
	if len(got) < 3 || !strings.HasPrefix(got[0], "resolve ") || !strings.HasPrefix(got[len(got)-1], "done ") {
		t.Errorf("image_pull's progress = %q; want resolve … done", got)
	}

	mustCall(t, cs, "image_list", nil, &ls)
	if len(ls.Images) != 1 || ls.Images[0].Name != ref || ls.Images[0].Source != sandbox.ImageSourceRegistry {
		t.Errorf("image_list after the pull = %+v", ls)
	}
	mustCall(t, e.connect(t, agentA2, nil), "image_list", nil, &ls)
	if len(ls.Images) != 1 {
		t.Errorf("image_list as a2, of the same tenant = %+v; want the image", ls)
	}
	mustCall(t, cs, "sandbox_create", map[string]any{"name": "box", "image": pulled.Name}, nil)
	sb, err := e.svc.Sandboxes.Get(t.Context(), agentA1, "box")
	if err != nil || sb.Image != ref || sb.ImageDigest != pulled.Digest {
		t.Errorf("the sandbox from the image = %+v, %v", sb, err)
	}

	for _, args := range []map[string]any{{"ref": "Not A Reference"}, {}} {
		var te toolError
		if res := call(t, cs, "image_pull", args, &te); !res.IsError || te.Code != sandbox.CodeInvalidArgument {
			t.Errorf("image_pull(%v) = %s (%+v); want invalid_argument", args, text(res), te)
		}
	}

	if err := e.recorder.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	events, err := e.db.Audit().List(t.Context(), sandbox.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	verbs := map[string]int{}
	for _, ev := range events {
		verbs[ev.Verb+" "+string(ev.Code)]++
	}
	if verbs["image.pull "] != 1 || verbs["image.pull invalid_argument"] != 2 || verbs["image.list "] != 3 {
		t.Errorf("audited %v; want image.pull and image.list", verbs)
	}
}
