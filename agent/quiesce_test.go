package agent_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/hearth/hearth/agent"
)

// TestQuiesceServesQueued: a connection the host made before it asked
// for quiet is served, never reset: Quiesce may come before the agent has
// accepted it (a sandbox's agent gets the signal a moment after the host's
// last connection), and an accepted one is always counted among the
// operations Quiesce waits for. Each round connects eight callers, writes
// their pings and quiesces at once; every ping must be answered.
func TestQuiesceServesQueued(t *testing.T) {
	for round := range 40 {
		sock := shortSocket(t)
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		srv := agent.NewServer(agent.Options{Home: t.TempDir()})
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if _, err := agent.NewClient(dialer(sock)).Ping(ctx); err != nil {
			t.Fatalf("round %d: ping before the burst: %v", round, err)
		}
		var conns []net.Conn
		for range 8 {
			c, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatalf("round %d: dial: %v", round, err)
			}
			if err := agent.WriteJSON(c, agent.FrameRequest, agent.Request{Op: agent.OpPing}); err != nil {
				t.Fatalf("round %d: write the ping: %v", round, err)
			}
			conns = append(conns, c)
		}
		srv.Quiesce(ctx)
		for i, c := range conns {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			kind, payload, err := agent.ReadFrame(c, nil)
			if err != nil || kind != agent.FrameResult {
				t.Errorf("round %d: caller %d connected before Quiesce got %q %q, %v; want its ping's result", round, i, kind, payload, err)
			}
			c.Close()
		}
		if err := <-served; err != nil {
			t.Errorf("round %d: Serve = %v", round, err)
		}
		if _, err := net.Dial("unix", sock); err == nil {
			t.Errorf("round %d: the quiet agent still accepts", round)
		}
		srv.Shutdown(ctx)
		cancel()
		if t.Failed() {
			return
		}
	}
}
