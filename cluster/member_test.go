package cluster_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/cluster"
	"github.com/hearth/hearth/store"
	"github.com/hearth/hearth/store/sqlite"
)

func openStore(t *testing.T) store.Store {
	t.Helper()
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "hearth.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func member(db store.Store, node string) *cluster.Member {
	return cluster.New(cluster.Options{Store: db, Node: node, Address: "127.0.0.1:1", Version: "v", Instance: "i-" + node,
		Interval: 20 * time.Millisecond, LeaseTTL: 200 * time.Millisecond, DeadAfter: 300 * time.Millisecond})
}

// eventually waits up to 5 s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 5s: %s", what)
		}
	}
}

// TestOneLeader: of two members running at once exactly one leads; when
// it stops, the other takes over (at once: a stopping member hands the
// lease over); health names the leader and both nodes.
func TestOneLeader(t *testing.T) {
	db := openStore(t)
	ms := []*cluster.Member{member(db, "a"), member(db, "b")}
	var stops []func()
	for _, m := range ms {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { m.Run(ctx); close(done) }()
		stops = append(stops, func() { cancel(); <-done })
	}
	eventually(t, "one of a and b leads", func() bool { return ms[0].Leading() != ms[1].Leading() })
	for i := 0; i < 20; i++ {
		if ms[0].Leading() == ms[1].Leading() {
			t.Fatalf("a leads %v, b leads %v: want exactly one", ms[0].Leading(), ms[1].Leading())
		}
		time.Sleep(10 * time.Millisecond)
	}
	l := 0
	if ms[1].Leading() {
		l = 1
	}
	leader, other := ms[l], ms[1-l]
	h, err := other.Health(t.Context(), "sqlite x")
	if err != nil || h.Leader != leader.Node() || len(h.Nodes) != 2 || !h.Nodes[0].Live || !h.Nodes[1].Live || h.Schema != h.SchemaKnown {
		t.Fatalf("Health = %+v, %v", h, err)
	}
	stops[l]()
	eventually(t, "the other leads once the leader stopped", other.Leading)
	eventually(t, "the stopped leader counts as down", func() bool { return other.Down(t.Context(), leader.Node()) != "" })
	if why := other.Down(t.Context(), other.Node()); why != "" {
		t.Errorf("Down of a node that runs = %q, want alive", why)
	}
	if why := other.Down(t.Context(), "nobody"); why == "" {
		t.Error("Down of a node the store does not know = alive")
	}
	// The answer is reused for a moment, then read again: a node that
	// joins is known once that moment has passed.
	if err := member(db, "nobody").Join(t.Context()); err != nil {
		t.Fatal(err)
	}
	unknown := func() bool { return strings.Contains(other.Down(t.Context(), "nobody"), "not known") }
	if !unknown() {
		t.Error("Down of a node that joined a moment after it was asked no longer says it is unknown; want the answer of a moment ago")
	}
	eventually(t, "a node that joined is known", func() bool { return !unknown() })
	stops[1-l]()
}

// TestVerify: a member verifies another's current credential, not a
// forged one nor one of a node the store does not know.
func TestVerify(t *testing.T) {
	db := openStore(t)
	a, b := member(db, "a"), member(db, "b")
	for _, m := range []*cluster.Member{a, b} {
		if err := m.Join(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := b.Verify(t.Context(), "a", a.Secret()); !ok || err != nil {
		t.Errorf("Verify(a's secret) = %v, %v; want true", ok, err)
	}
	if ok, _ := b.Verify(t.Context(), "a", b.Secret()); ok {
		t.Error("b's secret verified as a's")
	}
	if ok, err := b.Verify(t.Context(), "c", a.Secret()); ok || err != cluster.ErrUnknownNode {
		t.Errorf("Verify of an unknown node = %v, %v; want ErrUnknownNode", ok, err)
	}
	f := cluster.NewForwarder(b, nil)
	r, _ := http.NewRequest("GET", "/", nil)
	if fwd, err := f.Verify(r); fwd != "" || err != nil {
		t.Errorf("a call naming no node = %v, %v; want an ordinary call", fwd, err)
	}
	r.Header.Set(cluster.HeaderNode, "a")
	r.Header.Set(cluster.HeaderCredential, "forged")
	if _, err := f.Verify(r); err == nil {
		t.Error("a forged node credential verified")
	}
	r.Header.Set(cluster.HeaderCredential, a.Secret())
	if fwd, err := f.Verify(r); fwd != "a" || err != nil {
		t.Errorf("a's call with its credential = %v, %v; want forwarded", fwd, err)
	}
}
