package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
)

// TestBadInput sends what a careless or hostile caller would, and checks
// that each gets a clear, structured error and that nothing is lost.
func TestBadInput(t *testing.T) {
	requireDaemon(t)
	d := newDaemon(t, bins.Runtimes[0])
	ctx := ctxT(t)
	c := d.Client()
	if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "bad"}); err != nil {
		t.Fatal(err)
	}

	t.Run("traversal stays inside", func(t *testing.T) {
		var got bytes.Buffer
		if err := c.ReadFile(ctx, "bad", "../../../../etc/passwd", &got); err != nil {
			t.Fatal(err)
		}
		host, _ := os.ReadFile("/etc/passwd")
		if !strings.Contains(got.String(), "sandbox:x:1000") || bytes.Equal(got.Bytes(), host) {
			t.Fatalf("../../../../etc/passwd read %q; want the sandbox's passwd, not the host's", got.String())
		}
	})
	t.Run("symlink escape stays inside", func(t *testing.T) {
		marker := "hearth-escape-" + time.Now().Format("150405.000000")
		if res, err := c.Exec(ctx, "bad", sandbox.ExecRequest{Shell: "ln -s / hostroot && ln -s /tmp tmplink"}, nil, nil, nil); err != nil || res.ExitCode != 0 {
			t.Fatalf("ln -s = %+v, %v", res, err)
		}
		for _, p := range []string{"hostroot/tmp/" + marker, "tmplink/" + marker} {
			if _, err := c.WriteFile(ctx, "bad", sandbox.WriteRequest{Path: p}, strings.NewReader("x")); err != nil {
				t.Fatalf("WriteFile(%s) = %v", p, err)
			}
		}
		if _, err := os.Stat("/tmp/" + marker); !os.IsNotExist(err) {
			os.Remove("/tmp/" + marker)
			t.Fatalf("a write through a sandbox symlink reached the host's /tmp/%s", marker)
		}
		if _, err := c.Stat(ctx, "bad", "/tmp/"+marker); err != nil {
			t.Fatalf("the write did not land in the sandbox's /tmp: %v", err)
		}
	})
	t.Run("the image stays untouched", func(t *testing.T) {
		// The file API runs as the sandbox user: what it changes is the
		// user's, here in its home, which the image holds too.
		if _, err := c.WriteFile(ctx, "bad", sandbox.WriteRequest{Path: "/home/sandbox/hearth-marker"}, strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
		if err := c.Remove(ctx, "bad", "/home/sandbox/.profile", false); err != nil {
			t.Fatalf("Remove(/home/sandbox/.profile) = %v", err)
		}
		if err := c.Remove(ctx, "bad", "/usr/bin/python3", false); !sandbox.IsCode(err, sandbox.CodePermissionDenied) {
			t.Fatalf("Remove(/usr/bin/python3), root's, as the sandbox user = %v; want permission_denied", err)
		}
		if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "fresh"}); err != nil {
			t.Fatal(err)
		}
		defer c.Destroy(ctx, "fresh")
		if _, err := c.Stat(ctx, "fresh", "/home/sandbox/hearth-marker"); !sandbox.IsCode(err, sandbox.CodeNotFound) {
			t.Fatalf("a new sandbox sees another's /home/sandbox/hearth-marker: %v", err)
		}
		if _, err := c.Stat(ctx, "fresh", "/home/sandbox/.profile"); err != nil {
			t.Fatalf("a new sandbox lacks /home/sandbox/.profile: %v", err)
		}
	})
	t.Run("invalid names", func(t *testing.T) {
		for _, name := range []string{"UPPER", "-lead", "trail-", "under_score", "dot.ted", strings.Repeat("a", 64), "sp ace"} {
			_, _, err := c.Create(ctx, sandbox.CreateRequest{Name: name})
			if !sandbox.IsCode(err, sandbox.CodeInvalidArgument) {
				t.Errorf("Create(%q) = %v; want invalid_argument", name, err)
			}
		}
	})
	t.Run("oversized write keeps nothing", func(t *testing.T) {
		if _, err := c.WriteFile(ctx, "bad", sandbox.WriteRequest{Path: "keep.txt"}, strings.NewReader("original")); err != nil {
			t.Fatal(err)
		}
		big := bytes.Repeat([]byte("x"), 64<<20+1)
		_, err := c.WriteFile(ctx, "bad", sandbox.WriteRequest{Path: "keep.txt"}, bytes.NewReader(big))
		if !sandbox.IsCode(err, sandbox.CodeTooLarge) {
			t.Fatalf("WriteFile(64 MiB + 1) = %v; want too_large", err)
		}
		var got bytes.Buffer
		if err := c.ReadFile(ctx, "bad", "keep.txt", &got); err != nil || got.String() != "original" {
			t.Fatalf("keep.txt after the refused write = %q, %v; want \"original\"", got.String(), err)
		}
		// A 16 MiB write is fine.
		mid := bytes.Repeat([]byte("y"), 16<<20)
		if info, err := c.WriteFile(ctx, "bad", sandbox.WriteRequest{Path: "mid.bin"}, bytes.NewReader(mid)); err != nil || info.Size != int64(len(mid)) {
			t.Fatalf("WriteFile(16 MiB) = %+v, %v", info, err)
		}
	})
	t.Run("unknown sandbox", func(t *testing.T) {
		_, err := c.Get(ctx, "nosuch")
		if !sandbox.IsCode(err, sandbox.CodeNotFound) {
			t.Fatalf("Get(nosuch) = %v; want not_found", err)
		}
		if _, err := c.Exec(ctx, "nosuch", sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil); !sandbox.IsCode(err, sandbox.CodeNotFound) {
			t.Fatalf("Exec(nosuch) = %v; want not_found", err)
		}
	})
	t.Run("missing or wrong token", func(t *testing.T) {
		for _, tok := range []string{"", "hearth_wrong", "garbage"} {
			_, err := client.New(d.URL, tok, nil).List(ctx)
			if !sandbox.IsCode(err, sandbox.CodeUnauthenticated) {
				t.Errorf("List with token %q = %v; want unauthenticated", tok, err)
			}
		}
		resp, err := http.Get(d.URL + "/v1/sandboxes")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("GET /v1/sandboxes without a token = %d, WWW-Authenticate %q; want 401 Bearer", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
	})
	t.Run("malformed exec messages", func(t *testing.T) {
		for _, msg := range []string{`{`, `{"argv":[]}`, `{"argv":["true"],"shell":"true"}`, `{"nope":1}`, `[]`, `{"argv":["a\u0000b"]}`, `{"timeout":"-1s","argv":["true"]}`} {
			got := rawExec(t, d, websocket.MessageText, []byte(msg))
			if got.Type != "error" || got.Error == nil || got.Error.Code != sandbox.CodeInvalidArgument {
				t.Errorf("exec message %s answered %+v; want an invalid_argument error", msg, got)
			}
		}
		if got := rawExec(t, d, websocket.MessageBinary, []byte{1, 2, 3}); got.Type != "error" {
			t.Errorf("binary first message answered %+v; want an error", got)
		}
		// The sandbox still works.
		if res, err := c.Exec(ctx, "bad", sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil); err != nil || res.ExitCode != 0 {
			t.Fatalf("exec true after malformed messages = %+v, %v", res, err)
		}
	})
}

type endMessage struct {
	Type   string              `json:"type"`
	Result *sandbox.ExecResult `json:"result"`
	Error  *sandbox.Error      `json:"error"`
}

// rawExec opens the exec WebSocket of sandbox "bad" by hand, sends one
// message and returns the final text message.
func rawExec(t *testing.T, d *daemon, typ websocket.MessageType, msg []byte) endMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(d.URL, "http") + "/v1/sandboxes/bad/exec"
	conn, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + d.Token}}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	if err := conn.Write(ctx, typ, msg); err != nil {
		t.Fatal(err)
	}
	for {
		mt, data, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("read after sending %q: %v", msg, err)
		}
		if mt == websocket.MessageText {
			var end endMessage
			if err := json.Unmarshal(data, &end); err != nil {
				t.Fatalf("bad end message %q: %v", data, err)
			}
			return end
		}
	}
}
