package attack_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/httpapi"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/daemonproc"
)

// The doors' attacks: a tenant that floods the daemon with what it reads
// before deciding (first messages, bodies, connections) to exhaust its
// memory and take every tenant's sandboxes down with it.

// doorTenants is the --tenants file of the doors' attacks: the attacker
// "evil" (two agents), the victim "good".
const doorTenants = `{
  "tenants": [
    {"name": "evil", "allocation": {"millicpu": 400000, "memory_bytes": 1099511627776, "disk_bytes": 4398046511104}},
    {"name": "good", "allocation": {"millicpu": 400000, "memory_bytes": 1099511627776, "disk_bytes": 4398046511104}}
  ],
  "agents": [{"name": "mallory", "tenant": "evil"}, {"name": "trudy", "tenant": "evil"}, {"name": "alice", "tenant": "good"}]
}`

const (
	// attackConns is how many connections each flood opens at once.
	attackConns = 16
	// firstMessage is the size of each flood's first message: all of them
	// held would take the daemon near 1 GiB.
	firstMessage = 60 << 20
	// memoryBound is what the daemon's resident memory must stay under.
	memoryBound = 1 << 30
	// startTimeout is the daemon's wait for an exec's first message
	// (httpapi.DefaultExecStartTimeout).
	startTimeout = httpapi.DefaultExecStartTimeout
)

// doorsDaemon is a daemon with the doors' tenants, and a client per agent.
type doorsDaemon struct {
	*daemonproc.Daemon
	tokens map[string]string // by agent
}

func newDoorsDaemon(t *testing.T, runtime string) *doorsDaemon {
	file := filepath.Join(t.TempDir(), "tenants.json")
	if err := os.WriteFile(file, []byte(doorTenants), 0o600); err != nil {
		t.Fatal(err)
	}
	d := &doorsDaemon{Daemon: daemonproc.New(t, runtime, "--tenants", file), tokens: map[string]string{}}
	for _, a := range [][2]string{{"evil", "mallory"}, {"evil", "trudy"}, {"good", "alice"}} {
		tok, _, err := d.Client().Admin().CreateToken(ctxT(t), sandbox.TokenRequest{Tenant: a[0], Agent: a[1], Role: sandbox.RoleAgent})
		if err != nil {
			t.Fatalf("token for %s/%s: %v", a[0], a[1], err)
		}
		d.tokens[a[1]] = tok
	}
	return d
}

// as is a client with agent's token.
func (d *doorsDaemon) as(agent string) *client.Client { return client.New(d.URL, d.tokens[agent], nil) }

// create makes agent's sandbox name and returns its stored name.
func (d *doorsDaemon) create(t *testing.T, agent, name string) string {
	t.Helper()
	sb, _, err := d.as(agent).Create(ctxT(t), sandbox.CreateRequest{Name: name})
	if err != nil {
		t.Fatalf("Create(%s) as %s: %v", name, agent, err)
	}
	return sb.Name
}

// dialExec opens the exec WebSocket of sandbox name as agent.
func (d *doorsDaemon) dialExec(ctx context.Context, agent, name string) (*websocket.Conn, *http.Response, error) {
	return websocket.Dial(ctx, d.URL+"/v1/sandboxes/"+url.PathEscape(name)+"/exec",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + d.tokens[agent]}}})
}

// memory samples a process's resident memory (VmRSS) until stopped, and
// reports the largest sample and the process's peak (VmHWM) then.
type memory struct {
	pid  int
	max  atomic.Int64
	stop chan struct{}
	done chan struct{}
}

func sampleMemory(t *testing.T, pid int) *memory {
	m := &memory{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			if rss, _, err := procMemory(pid); err == nil && rss > m.max.Load() {
				m.max.Store(rss)
			}
			select {
			case <-m.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return m
}

// end stops the sampling and returns the largest VmRSS seen and VmHWM.
func (m *memory) end(t *testing.T) (maxRSS, hwm int64) {
	close(m.stop)
	<-m.done
	_, hwm, err := procMemory(m.pid)
	if err != nil {
		t.Fatalf("read the daemon's memory: %v", err)
	}
	return m.max.Load(), hwm
}

// procMemory reads VmRSS and VmHWM of pid, in bytes.
func procMemory(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			hwm = kb << 10
		}
	}
	return rss, hwm, nil
}

// TestExecFloodHoldsNoMemory: 16 connections at once, each sending a
// 60 MiB first message, against a sandbox that does not exist, against
// another tenant's and against the attacker's own, plus 16 that send their
// first message a byte a second, while other sandboxes run: the daemon's
// memory stays under 1 GiB throughout, every sandbox survives, and the
// victim's calls are answered meanwhile. Before the fix the daemon buffered
// each first message whole: this test took it from 19 MiB to 8.2 GiB.
func TestExecFloodHoldsNoMemory(t *testing.T) {
	daemonproc.ForEachRuntime(t, func(t *testing.T, runtime string) {
		d := newDoorsDaemon(t, runtime)
		ctx := ctxT(t)
		mine := d.create(t, "mallory", "mine")
		web := d.create(t, "alice", "web")
		other := d.create(t, "alice", "other")
		for _, name := range []string{web, other} {
			if res, err := d.as("alice").Exec(ctx, name, sandbox.ExecRequest{Shell: "nohup sleep 600 >/dev/null 2>&1 &"}, nil, nil, nil); err != nil || res.ExitCode != 0 {
				t.Fatalf("start a process in %s: %+v, %v", name, res, err)
			}
		}
		before, _, err := procMemory(d.Cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		mem := sampleMemory(t, d.Cmd.Process.Pid)

		slow := slowFirstMessages(ctx, t, d, mine)
		victim := keepCalling(ctx, d.as("alice"), web)
		var wg sync.WaitGroup
		for range attackConns {
			for _, target := range []string{"nosuch", web} {
				wg.Go(func() { refusedAtHandshake(ctx, t, d, target) })
			}
			wg.Go(func() { oversizedFirstMessage(ctx, t, d, mine) })
		}
		wg.Wait()
		for _, err := range slow() { // some 30s more of the victim's calls
			t.Error(err)
		}
		calls, slowest, failures := victim()
		maxRSS, hwm := mem.end(t)
		t.Logf("daemon memory: %d MiB at the start, at most %d MiB during the attack (VmHWM %d MiB); the victim's %d calls took at most %v",
			before>>20, maxRSS>>20, hwm>>20, calls, slowest)
		if maxRSS >= memoryBound || hwm >= memoryBound {
			t.Errorf("the daemon's resident memory reached %d MiB (VmHWM %d MiB); want it under %d MiB", maxRSS>>20, hwm>>20, memoryBound>>20)
		}
		if len(failures) > 0 || calls == 0 || slowest > 10*time.Second {
			t.Errorf("the victim's calls during the attack: %d made, the slowest %v, failures %v; want all answered within 10s", calls, slowest, failures)
		}
		if !d.Running() {
			t.Fatal("the daemon died")
		}
		for _, sb := range []struct{ agent, name string }{{"mallory", mine}, {"alice", web}, {"alice", other}} {
			alive(ctx, t, d.as(sb.agent), sb.name)
		}
	})
}

// refusedAtHandshake opens an exec WebSocket on a sandbox the attacker
// cannot see, with a 60 MiB first message ready: the handshake must be
// refused (404), so that not a byte of it is read.
func refusedAtHandshake(ctx context.Context, t *testing.T, d *doorsDaemon, name string) {
	conn, resp, err := d.dialExec(ctx, "mallory", name)
	if err == nil {
		defer conn.CloseNow()
		t.Errorf("exec WebSocket on %s opened for the attacker; want 404 before the upgrade", name)
		sendFirstMessage(ctx, conn)
		return
	}
	if resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("exec WebSocket on %s: %v, %+v; want 404", name, err, resp)
	}
}

// oversizedFirstMessage sends a 60 MiB first message on the attacker's
// own sandbox: the daemon must answer too_large, with its limit, and
// close with 1009.
func oversizedFirstMessage(ctx context.Context, t *testing.T, d *doorsDaemon, name string) {
	conn, _, err := d.dialExec(ctx, "mallory", name)
	if err != nil {
		t.Errorf("exec WebSocket on the attacker's own %s: %v", name, err)
		return
	}
	defer conn.CloseNow()
	go sendFirstMessage(ctx, conn)
	readCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	typ, msg, err := conn.Read(readCtx)
	if err != nil || typ != websocket.MessageText {
		t.Errorf("oversized first message: %v %q, %v; want an end message", typ, msg, err)
		return
	}
	var end struct {
		Type  string
		Error *sandbox.Error
	}
	if json.Unmarshal(msg, &end) != nil || end.Error == nil || end.Error.Code != sandbox.CodeTooLarge ||
		end.Error.Details["max_bytes"] != float64(httpapi.DefaultMaxExecMessage) {
		t.Errorf("oversized first message answered %s; want too_large with max_bytes %d", msg, httpapi.DefaultMaxExecMessage)
	}
	if _, _, err := conn.Read(readCtx); websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Errorf("oversized first message: closed with %v; want 1009", err)
	}
}

// sendFirstMessage sends a text message of firstMessage bytes, a MiB at a
// time, until it is sent or the connection fails.
func sendFirstMessage(ctx context.Context, conn *websocket.Conn) {
	chunk := []byte(strings.Repeat("x", 1<<20))
	w, err := conn.Writer(ctx, websocket.MessageText)
	if err != nil {
		return
	}
	w.Write([]byte(`{"shell":"`))
	for range firstMessage >> 20 {
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
	w.Close()
}

// slowFirstMessages opens attackConns exec WebSockets on the attacker's
// own sandbox that send their first message a byte a second; wait returns
// what went wrong: each must be closed by the daemon at its start timeout.
func slowFirstMessages(ctx context.Context, t *testing.T, d *doorsDaemon, name string) (wait func() []error) {
	errs := make(chan error, attackConns)
	for range attackConns {
		conn, _, err := d.dialExec(ctx, "mallory", name)
		if err != nil {
			t.Fatalf("slow exec WebSocket: %v", err)
		}
		start := time.Now()
		w, _ := conn.Writer(ctx, websocket.MessageText)
		go func() {
			for range 120 { // a 120-byte message, never finished within the timeout
				if _, err := w.Write([]byte{' '}); err != nil {
					return
				}
				time.Sleep(time.Second)
			}
		}()
		go func() {
			defer conn.CloseNow()
			readCtx, cancel := context.WithTimeout(ctx, startTimeout+30*time.Second)
			defer cancel()
			_, _, err := conn.Read(readCtx)
			switch took := time.Since(start); {
			case err == nil:
				errs <- errors.New("a slow first message got an answer; want the connection closed")
			case readCtx.Err() != nil:
				errs <- fmt.Errorf("a slow first message was still open after %v; want it closed at the %v start timeout", took, startTimeout)
			case took < startTimeout-time.Second:
				errs <- fmt.Errorf("a slow first message was closed after %v, before the %v start timeout: %v", took, startTimeout, err)
			default:
				errs <- nil
			}
		}()
	}
	return func() []error {
		var out []error
		for range attackConns {
			if err := <-errs; err != nil {
				out = append(out, err)
			}
		}
		return out
	}
}

// keepCalling makes the victim's calls (an exec, a get) on its sandbox
// name over and over until stopped; stop reports how many were made, the
// slowest, and the failures.
func keepCalling(ctx context.Context, c *client.Client, name string) (stop func() (int, time.Duration, []error)) {
	var (
		done     = make(chan struct{})
		finished = make(chan struct{})
		calls    int
		slowest  time.Duration
		failures []error
	)
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			default:
			}
			start := time.Now()
			var out strings.Builder
			res, err := c.Exec(ctx, name, sandbox.ExecRequest{Argv: []string{"echo", "ok"}}, nil, &out, nil)
			if err == nil && (res.ExitCode != 0 || out.String() != "ok\n") {
				err = fmt.Errorf("exec answered %+v, %q", res, out.String())
			}
			if err == nil {
				_, err = c.Get(ctx, name)
			}
			calls++
			slowest = max(slowest, time.Since(start))
			if err != nil {
				failures = append(failures, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return func() (int, time.Duration, []error) {
		close(done)
		<-finished
		return calls, slowest, failures
	}
}

// alive checks that sandbox name still runs its commands and was not
// killed for its memory.
func alive(ctx context.Context, t *testing.T, c *client.Client, name string) {
	t.Helper()
	var out strings.Builder
	if res, err := c.Exec(ctx, name, sandbox.ExecRequest{Argv: []string{"echo", "alive"}}, nil, &out, nil); err != nil || res.ExitCode != 0 || out.String() != "alive\n" {
		t.Errorf("exec in %s after the attack: %+v, %v, %q; want it alive", name, res, err, out.String())
	}
	sb, err := c.Get(ctx, name)
	if err != nil || sb.Status != sandbox.StatusRunning || strings.Contains(sb.Reason, "oom") {
		t.Errorf("%s after the attack: %s %q, %v; want running, not OOM-killed", name, sb.Status, sb.Reason, err)
	}
}

// TestConnectionFloodRefused: an agent that opens more long-lived
// connections than its limit gets rate_limited for the one over it, with
// the limit and its count, and another tenant's calls are unaffected.
func TestConnectionFloodRefused(t *testing.T) {
	daemonproc.ForEachRuntime(t, func(t *testing.T, runtime string) {
		d := newDoorsDaemon(t, runtime)
		ctx := ctxT(t)
		mine := d.create(t, "trudy", "mine")
		web := d.create(t, "alice", "web")
		var held []*websocket.Conn
		defer func() {
			for _, c := range held {
				c.CloseNow()
			}
		}()
		for range door.DefaultMaxConnections {
			conn, _, err := d.dialExec(ctx, "trudy", mine)
			if err != nil {
				t.Fatalf("exec WebSocket %d of %d: %v", len(held)+1, door.DefaultMaxConnections, err)
			}
			held = append(held, conn)
		}
		for range attackConns {
			conn, resp, err := d.dialExec(ctx, "trudy", mine)
			if err == nil {
				conn.CloseNow()
				t.Fatalf("an exec WebSocket beyond the limit of %d opened", door.DefaultMaxConnections)
			}
			if resp == nil || resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("an exec WebSocket beyond the limit: %v, %+v; want 429", err, resp)
			}
		}
		var out strings.Builder
		_, err := d.as("trudy").Exec(ctx, mine, sandbox.ExecRequest{Argv: []string{"true"}}, nil, &out, nil)
		var se *sandbox.Error
		if !errors.As(err, &se) || se.Code != sandbox.CodeRateLimited || se.Details["limit"] != float64(door.DefaultMaxConnections) ||
			se.Details["current_count"] != float64(door.DefaultMaxConnections) || se.Hint == "" {
			t.Errorf("exec beyond the limit: %v (%+v); want rate_limited with limit and current_count %d and a hint", err, se, door.DefaultMaxConnections)
		}
		alive(ctx, t, d.as("alice"), web)
		held[0].CloseNow()
		held = held[1:]
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := d.as("trudy").Exec(ctx, mine, sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil); err == nil {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("exec after one connection closed: %v; want it served", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// TestOversizedWritesUnread: a file write whose Content-Length is over
// the limit, or that names a sandbox the attacker cannot see, is answered
// from its headers alone, in the native door and in the Sprites door: the
// attacker sends no byte of the body, and gets its answer.
func TestOversizedWritesUnread(t *testing.T) {
	daemonproc.ForEachRuntime(t, func(t *testing.T, runtime string) {
		d := newDoorsDaemon(t, runtime)
		mine := d.create(t, "mallory", "mine")
		web := d.create(t, "alice", "web")
		size := int64(lifecycle.DefaultMaxWriteBytes + 1) // over every limit
		q := url.Values{"path": {"/tmp/big"}}.Encode()
		for _, tc := range []struct {
			method, path string
			status       int
			want         string
		}{
			{"PUT", "/v1/sandboxes/" + mine + "/fs/file?" + q, http.StatusRequestEntityTooLarge, `"max_bytes":`},
			{"PUT", "/v1/sandboxes/" + web + "/fs/file?" + q, http.StatusNotFound, `"not_found"`},
			{"PUT", "/v1/sandboxes/nosuch/fs/file?" + q, http.StatusNotFound, `"not_found"`},
			{"PUT", "/v1/sprites/mine/fs/write?" + q, http.StatusRequestEntityTooLarge, `"EFBIG"`},
			{"PUT", "/v1/sprites/" + web + "/fs/write?" + q, http.StatusNotFound, `"not_found"`},
			{"PATCH", "/v1/sandboxes/" + web, http.StatusNotFound, `"not_found"`},
			{"PUT", "/v1/sprites/" + web, http.StatusNotFound, `"not_found"`},
			{"POST", "/v1/sandboxes", http.StatusRequestEntityTooLarge, `"too_large"`},
			{"POST", "/mcp", http.StatusRequestEntityTooLarge, `"too_large"`},
		} {
			status, body := headersOnly(t, d, tc.method, tc.path, size)
			if status != tc.status || !strings.Contains(body, tc.want) {
				t.Errorf("%s %s with a %d-byte Content-Length and no body sent: %d %s; want %d with %s", tc.method, tc.path, size, status, body, tc.status, tc.want)
			}
		}
		if _, err := d.as("mallory").Stat(ctxT(t), mine, "/tmp/big"); !sandbox.IsCode(err, sandbox.CodeNotFound) {
			t.Errorf("a refused write left /tmp/big: %v", err)
		}
	})
}

// headersOnly sends method path with a Content-Length of size and no body
// at all, and returns the answer's status and body: only a daemon that
// answers without reading the body answers at all.
func headersOnly(t *testing.T, d *doorsDaemon, method, path string, size int64) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(d.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n",
		method, path, d.tokens["mallory"], size)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s: no answer before the body: %v", method, path, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	n, _ := resp.Body.Read(buf)
	b.Write(buf[:n])
	return resp.StatusCode, b.String()
}
