package cluster_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/cluster"
	"github.com/hearth/hearth/testutil/testenv"
)

// TestForwardStreamAfterBody: a forwarded call whose body the owner reads
// whole before it streams its answer (a Sprites checkpoint: a JSON body,
// then NDJSON events) reaches the caller whole, however late the
// forwarding node's transport finishes with the body. The forwarding
// node's server used to close the body when the owner's header went out,
// and the transport's late read then tore the connection down
// mid-stream.
func TestForwardStreamAfterBody(t *testing.T) {
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b, err := io.ReadAll(r.Body); err != nil || string(b) != `{"comment":"x"}` {
			t.Errorf("the owner read body %q, %v", b, err)
		}
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "first\n")
		http.NewResponseController(w).Flush()
		time.Sleep(200 * time.Millisecond)
		io.WriteString(w, "last\n")
	}))
	defer owner.Close()

	db := openStore(t)
	a := cluster.New(cluster.Options{Store: db, Node: "a", Address: owner.Listener.Addr().String(), Version: "v", Instance: "i-a",
		Interval: time.Second, LeaseTTL: 2 * time.Second, DeadAfter: time.Minute})
	b := member(db, "b")
	for _, m := range []*cluster.Member{a, b} {
		if err := m.Join(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	f := cluster.NewForwarder(b, nil)
	front := httptest.NewServer(testenv.LateTail(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := f.Forward(w, r, "a"); err != nil {
			t.Errorf("Forward = %v", err)
		}
	}), 100*time.Millisecond))
	defer front.Close()

	for i := range 3 {
		resp, err := http.Post(front.URL+"/v1/sprites/web/checkpoint", "application/json", strings.NewReader(`{"comment":"x"}`))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(got) != "first\nlast\n" {
			t.Fatalf("call %d: the caller read %q, %v; want the owner's whole stream", i, got, err)
		}
	}
}
