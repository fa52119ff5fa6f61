package drivertest

import (
	"bytes"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/sandbox"
)

// connectPort is where testConnect's server listens in the sandbox, on
// 127.0.0.1; connectPort6 is another server's, on ::1 only, when the
// sandbox has an IPv6 loopback.
const (
	connectPort  = 8123
	connectPort6 = 8125
)

// testConnect: a server started in the sandbox, bound to its loopback, is
// listed by the agent's Ports and reached through its Connect, whatever the
// sandbox's network (none, for driver/oci): an HTTP/1.0 request sent with a
// half-close gets the file the server serves, then EOF. So is a server bound
// to ::1 only, when the sandbox has an IPv6 loopback. A port nothing listens
// on is unavailable, and names the port.
func (s *suite) testConnect(t *testing.T) {
	tg := s.cfg.New(t)
	spec := s.spec(t)
	s.start(t, tg.Driver, spec)
	c := agentClient(tg.Driver, spec.ID)
	ctx := t.Context()

	// The servers run in the background, in the home they serve; the exec
	// returns at once, saying whether it started the IPv6 one.
	var out bytes.Buffer
	res, err := c.Exec(ctx, sandbox.ExecRequest{
		Shell: `echo "hello from ` + spec.ID + `" > drivertest-connect.txt
serve() { python3 -m http.server "$1" --bind "$2" </dev/null >/dev/null 2>&1 & }
serve ` + strconv.Itoa(connectPort) + ` 127.0.0.1
if grep -qs ' lo$' /proc/net/if_inet6; then serve ` + strconv.Itoa(connectPort6) + ` ::1; echo ipv6; fi`,
		Timeout: sandbox.Duration(30 * time.Second),
	}, nil, &out, &out)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec(%s, start servers) = %+v, %v: %s", spec.ID, res, err, out.Bytes())
	}
	want := []sandbox.ListeningPort{{Port: connectPort, Address: "127.0.0.1"}}
	if strings.Contains(out.String(), "ipv6") {
		want = append(want, sandbox.ListeningPort{Port: connectPort6, Address: "::1"})
	} else {
		t.Logf("sandbox %s has no IPv6 loopback: no server on ::1", spec.ID)
	}

	var ports []sandbox.ListeningPort
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ports, err = c.Ports(ctx)
		if err != nil {
			t.Fatalf("Ports(%s) = %v", spec.ID, err)
		}
		if !slices.ContainsFunc(want, func(w sandbox.ListeningPort) bool { return !slices.Contains(ports, w) }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Ports(%s) = %v after 30s, want it to hold %v", spec.ID, ports, want)
		}
	}
	t.Logf("Ports(%s) = %v", spec.ID, ports)

	for _, w := range want {
		if got := get(t, c, w.Port, "/drivertest-connect.txt"); !strings.HasPrefix(got, "HTTP/1.0 200") || !strings.HasSuffix(got, "\r\n\r\nhello from "+spec.ID+"\n") {
			t.Errorf("GET through Connect(%s, %d) = %q, want a 200 with the file", spec.ID, w.Port, got)
		}
	}

	refused := connectPort + 1
	if conn, err := c.Connect(ctx, refused); err == nil {
		conn.Close()
		t.Errorf("Connect(%s, %d) with nothing listening succeeded", spec.ID, refused)
	} else if !sandbox.IsCode(err, sandbox.CodeUnavailable) || !strings.Contains(err.Error(), strconv.Itoa(refused)) {
		t.Errorf("Connect(%s, %d) with nothing listening = %v, want unavailable naming the port", spec.ID, refused, err)
	}
}

// get sends an HTTP/1.0 GET of path through c.Connect(port), half-closes,
// and returns the whole answer.
func get(t *testing.T, c *agent.Client, port int, path string) string {
	t.Helper()
	conn, err := c.Connect(t.Context(), port)
	if err != nil {
		t.Fatalf("Connect(%d) = %v", port, err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.0\r\nHost: sandbox\r\n\r\n"); err != nil {
		t.Fatalf("writing the request to port %d: %v", port, err)
	}
	cw, ok := conn.(interface{ CloseWrite() error })
	if !ok {
		t.Fatalf("Connect(%d) returned a %T, which cannot half-close", port, conn)
	}
	if err := cw.CloseWrite(); err != nil {
		t.Fatalf("CloseWrite() on port %d = %v", port, err)
	}
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	answer, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("reading the answer from port %d: %v (after %q)", port, err, answer)
	}
	return string(answer)
}
