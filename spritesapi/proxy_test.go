package spritesapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hearth/hearth/testutil/daemontest"
	"github.com/hearth/hearth/testutil/testenv"
)

// tcpEcho is a TCP server standing in for one in the sprite (under
// driver/fake the sprite's loopback is the host's): it answers each line
// upper-cased.
func tcpEcho(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(io.LimitReader(c, 5))
				c.Write([]byte(strings.ToUpper(string(b))))
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// The TCP proxy: the port asked for, "connected", then bytes both ways;
// a host other than the sprite's loopback and a port nothing listens on
// are refused with status "error".
func TestTCPProxy(t *testing.T) {
	e := newEnv(t, daemontest.Options{})
	e.create(t, tok, "box")
	port := tcpEcho(t)
	open := func(first string) (*websocket.Conn, map[string]string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		t.Cleanup(cancel)
		ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.url, "http")+"/v1/sprites/box/proxy",
			&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ws.CloseNow() })
		ws.Write(ctx, websocket.MessageText, []byte(first))
		_, msg, err := ws.Read(ctx)
		var reply map[string]string
		if err != nil || json.Unmarshal(msg, &reply) != nil {
			t.Fatalf("reply %q %v", msg, err)
		}
		return ws, reply
	}
	ws, reply := open(`{"host":"localhost","port":` + strconv.Itoa(port) + `}`)
	if reply["status"] != "connected" || reply["target"] != "localhost:"+strconv.Itoa(port) {
		t.Fatalf("reply %v", reply)
	}
	ws.Write(t.Context(), websocket.MessageBinary, []byte("hel"))
	ws.Write(t.Context(), websocket.MessageBinary, []byte("lo"))
	var got []byte
	for len(got) < 5 {
		_, msg, err := ws.Read(t.Context())
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got = append(got, msg...)
	}
	if string(got) != "HELLO" {
		t.Errorf("through the proxy: %q, want HELLO", got)
	}
	if _, reply = open(`{"host":"10.0.0.1","port":` + strconv.Itoa(port) + `}`); reply["status"] != "error" || !strings.Contains(reply["message"], "loopback") {
		t.Errorf("another host: %v", reply)
	}
	if _, reply = open(`{"port":` + strconv.Itoa(testenv.FreePort(t)) + `}`); reply["status"] != "error" || !strings.Contains(reply["message"], "listening") {
		t.Errorf("nothing listening: %v", reply)
	}
}

// A sprite's url is its port 8080's URL; url_settings public makes that
// port public, sprite private again.
func TestSpriteURL(t *testing.T) {
	e := newEnv(t, daemontest.Options{})
	var s struct {
		URL         string `json:"url"`
		URLSettings struct {
			Auth string `json:"auth"`
		} `json:"url_settings"`
	}
	e.want(t, http.StatusCreated, "POST", "/v1/sprites", tok, `{"name":"site","url_settings":{"auth":"public"}}`, &s)
	// The URL names the sandbox's tenant: names are unique per tenant.
	if s.URL != e.url+"/v1/sandboxes/t1%2Fagent-a1-site/proxy/8080/" || s.URLSettings.Auth != "public" {
		t.Errorf("created %+v", s)
	}
	sb, err := e.d.Svc.Sandboxes.Get(t.Context(), daemontest.AgentA1, "site")
	if err != nil || len(sb.PublicPorts) != 1 || sb.PublicPorts[0] != 8080 {
		t.Errorf("public ports %v, %v; want [8080]", sb.PublicPorts, err)
	}
	e.want(t, http.StatusOK, "PUT", "/v1/sprites/site", tok, `{"url_settings":{"auth":"sprite"}}`, &s)
	if sb, _ = e.d.Svc.Sandboxes.Get(t.Context(), daemontest.AgentA1, "site"); s.URLSettings.Auth != "sprite" || len(sb.PublicPorts) != 0 {
		t.Errorf("after auth sprite: %+v, public ports %v", s, sb.PublicPorts)
	}
	e.wantError(t, http.StatusBadRequest, "invalid_argument", "PUT", "/v1/sprites/site", tok, `{"url_settings":{"auth":"everyone"}}`)
}
