package e2e_test

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/hearth/hearth/sandbox"
)

// collector is an OTLP/HTTP trace collector stub: it keeps every span it
// is sent.
type collector struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	// service is the service.name of the resources the spans came with.
	service []string
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req collectorpb.ExportTraceServiceRequest
	if r.URL.Path != "/v1/traces" || err != nil || proto.Unmarshal(body, &req) != nil {
		http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				c.service = append(c.service, a.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.ScopeSpans {
			c.spans = append(c.spans, ss.Spans...)
		}
	}
	c.mu.Unlock()
	out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// find returns the spans called name.
func (c *collector) find(name string) []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range c.spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// children returns the spans whose parent is s.
func (c *collector) children(s *tracepb.Span) []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*tracepb.Span
	for _, k := range c.spans {
		if slices.Equal(k.ParentSpanId, s.SpanId) && slices.Equal(k.TraceId, s.TraceId) {
			out = append(out, k)
		}
	}
	return out
}

// TestTracing: a daemon started with --otlp-endpoint sends the spans of
// its API calls to the collector over OTLP/HTTP: a create's door span
// (sandbox.create, a server span, the root of its trace) has lifecycle's
// create as its child, which has the node's runtime start as its; an
// exec's has lifecycle's exec and under it the agent's; a checkpoint's
// reaches the node's snapshot, and a restore's the node's rollback and
// start. The spans carry hearth's service name and the call's sandbox.
func TestTracing(t *testing.T) {
	col := &collector{}
	srv := httptest.NewServer(col)
	t.Cleanup(srv.Close)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100") // milliseconds
	d := newDaemon(t, preferredRuntime(t), "--otlp-endpoint", srv.URL)
	ctx := ctxT(t)
	cl := d.Client()
	if _, _, err := cl.Create(ctx, sandbox.CreateRequest{Name: "traced"}); err != nil {
		t.Fatal(err)
	}
	d.sh(ctx, "traced", "echo hi > /home/sandbox/f")
	ck, err := cl.Checkpoint(ctx, "traced", sandbox.CheckpointRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Restore(ctx, "traced", ck.ID); err != nil {
		t.Fatal(err)
	}

	// door verb → lifecycle span → what the node or the agent did.
	chains := [][]string{
		{"sandbox.create", "lifecycle.create", "node.start"},
		{"sandbox.exec", "lifecycle.exec", "agent.exec"},
		{"checkpoint.create", "lifecycle.checkpoint", "node.checkpoint"},
		{"sandbox.restore", "lifecycle.restore", "node.rollback"},
		{"sandbox.restore", "lifecycle.restore", "node.start"},
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, chain := range chains {
		for {
			err := col.chain(chain)
			if err == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no trace %s: %s", strings.Join(chain, " → "), err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	root := col.find("sandbox.create")[0]
	if len(root.ParentSpanId) != 0 || root.Kind != tracepb.Span_SPAN_KIND_SERVER || !hasAttr(root, "hearth.sandbox", "traced") || !hasAttr(root, "hearth.tenant", "system") {
		t.Errorf("the create's door span = parent %x, kind %v, attributes %v; want a root server span naming the sandbox and its tenant", root.ParentSpanId, root.Kind, root.Attributes)
	}
	col.mu.Lock()
	services := slices.Compact(slices.Sorted(slices.Values(col.service)))
	col.mu.Unlock()
	if !slices.Equal(services, []string{"hearth"}) {
		t.Errorf("the spans came with services %q, want hearth", services)
	}
}

// TestTracingForwarded: on two daemons of one store, an exec sent to the
// node that does not run the sandbox is one trace: its door span there
// has the running node's door span as its child (the trace context goes
// with the forwarded call), under which lifecycle's exec and the agent's
// are.
func TestTracingForwarded(t *testing.T) {
	requireDaemon(t)
	col := &collector{}
	srv := httptest.NewServer(col)
	t.Cleanup(srv.Close)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	ds, _ := sharedStore(t, bins.Runtimes[0], 2, "--otlp-endpoint", srv.URL)
	ctx := ctxT(t)
	if _, _, err := ds[0].Client().Create(ctx, sandbox.CreateRequest{Name: "far"}); err != nil {
		t.Fatal(err)
	}
	ds[1].sh(ctx, "far", "true")
	chain := []string{"sandbox.exec", "sandbox.exec", "lifecycle.exec", "agent.exec"}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := col.chain(chain)
		if err == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no trace %s: %s", strings.Join(chain, " → "), err)
		}
	}
}

// chain is "" when a trace holds spans named chain[0], chain[1], …, each
// the child of the one before, else what is missing.
func (c *collector) chain(chain []string) string {
	for _, top := range c.find(chain[0]) {
		at, ok := top, true
		for _, name := range chain[1:] {
			var next *tracepb.Span
			for _, k := range c.children(at) {
				if k.Name == name {
					next = k
				}
			}
			if next == nil {
				ok = false
				break
			}
			at = next
		}
		if ok {
			return ""
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var seen []string
	for _, s := range c.spans {
		seen = append(seen, s.Name+"("+hex.EncodeToString(s.SpanId)+"←"+hex.EncodeToString(s.ParentSpanId)+")")
	}
	return "spans so far: " + strings.Join(seen, ", ")
}

func hasAttr(s *tracepb.Span, key, value string) bool {
	for _, a := range s.Attributes {
		if a.Key == key && a.GetValue().GetStringValue() == value {
			return true
		}
	}
	return false
}
