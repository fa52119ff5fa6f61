package cluster_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hearth/hearth/cluster"
	"github.com/hearth/hearth/door"
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

// TestForwardMoved: a call the sandbox's node answers with a move (the
// sandbox did not fit there awake, and moved: unavailable, marked by the
// door's Hearth-Moved-To) is sent once more to the node it moved to, when
// it has no body; one with a body gets the move's answer; a body that
// only claims a move steers nothing.
func TestForwardMoved(t *testing.T) {
	moved := `{"error":{"code":"unavailable","message":"moved","details":{"moved_to":"c"}}}`
	var again atomic.Int64
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/sandboxes/web/proxy/80/" {
			w.Header().Set(door.HeaderMovedTo, "c") // the node's door marks its move
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, moved)
	}))
	defer a.Close()
	c := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		again.Add(1)
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "woken on c: %d bytes", len(b))
	}))
	defer c.Close()
	db := openStore(t)
	var members []*cluster.Member
	for name, addr := range map[string]string{"a": a.Listener.Addr().String(), "c": c.Listener.Addr().String(), "b": "127.0.0.1:1"} {
		m := cluster.New(cluster.Options{Store: db, Node: name, Address: addr, Version: "v", Instance: "i-" + name,
			Interval: time.Second, LeaseTTL: 2 * time.Second, DeadAfter: time.Minute})
		if err := m.Join(t.Context()); err != nil {
			t.Fatal(err)
		}
		if name == "b" {
			members = append(members, m)
		}
	}
	f := cluster.NewForwarder(members[0], nil)
	f.SetWakeMoves(true)
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/sandboxes/{name}/", func(w http.ResponseWriter, r *http.Request) {
		if err := f.Forward(w, r, "a"); err != nil {
			t.Errorf("Forward = %v", err)
		}
	})
	front := httptest.NewServer(mux)
	defer front.Close()
	resp, body := testenv.Do(t, "POST", front.URL+"/v1/sandboxes/web/wake", "", "")
	if resp.StatusCode != 200 || string(body) != "woken on c: 0 bytes" || again.Load() != 1 {
		t.Errorf("a bodiless call moved = %d %q (%d calls on c); want c's answer", resp.StatusCode, body, again.Load())
	}
	// A body the forwarder kept goes to c whole; ahead of a larger one,
	// the forwarder wakes the sandbox on a, which moves it, and sends the
	// call, its body streaming, to c.
	resp, body = testenv.Do(t, "PUT", front.URL+"/v1/sandboxes/web/fs/file?path=x", "", strings.Repeat("d", cluster.MaxReplayBody))
	if want := fmt.Sprintf("woken on c: %d bytes", cluster.MaxReplayBody); resp.StatusCode != 200 || string(body) != want || again.Load() != 2 {
		t.Errorf("a call with a body of %d bytes moved = %d %q (%d calls on c); want %q", cluster.MaxReplayBody, resp.StatusCode, body, again.Load(), want)
	}
	resp, body = testenv.Do(t, "PUT", front.URL+"/v1/sandboxes/web/fs/file?path=x", "", strings.Repeat("d", cluster.MaxReplayBody+1))
	if want := fmt.Sprintf("woken on c: %d bytes", cluster.MaxReplayBody+1); resp.StatusCode != 200 || string(body) != want || again.Load() != 3 {
		t.Errorf("a call with a body of %d bytes moved = %d %q (%d calls on c); want %q, once", cluster.MaxReplayBody+1, resp.StatusCode, body, again.Load(), want)
	}
	// An answer whose body says moved_to without the door's header (a
	// sandbox's server, through its URL) steers nothing.
	resp, body = testenv.Do(t, "GET", front.URL+"/v1/sandboxes/web/proxy/80/", "", "")
	if resp.StatusCode != http.StatusServiceUnavailable || string(body) != moved || again.Load() != 3 {
		t.Errorf("a 503 naming moved_to in its body only = %d %q (%d calls on c); want it passed as it is", resp.StatusCode, body, again.Load())
	}
	// Where nodes move no sandbox to wake it, nothing is kept or woken
	// ahead: the move's answer is the call's.
	f.SetWakeMoves(false)
	resp, body = testenv.Do(t, "PUT", front.URL+"/v1/sandboxes/web/fs/file?path=x", "", "small")
	if resp.StatusCode != http.StatusServiceUnavailable || string(body) != moved || again.Load() != 3 {
		t.Errorf("a call with a body, without wake moves = %d %q (%d calls on c); want a's answer as it is", resp.StatusCode, body, again.Load())
	}
}
