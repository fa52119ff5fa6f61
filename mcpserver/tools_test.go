package mcpserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hearth/hearth/mcpserver"
	"github.com/hearth/hearth/sandbox"
)

// TestLifecycle drives the six tools through one session: create (and
// resume by name), exec, checkpoint, a change, restore, list, destroy.
func TestLifecycle(t *testing.T) {
	e := newEnv(t, mcpserver.Options{})
	cs := e.connect(t, agentA1, nil)

	var cr struct {
		ID           string   `json:"id"`
		Name         string   `json:"name"`
		Status       string   `json:"status"`
		Created      bool     `json:"created"`
		ExpiresAt    string   `json:"expires_at"`
		Capabilities []string `json:"capabilities"`
	}
	mustCall(t, cs, "sandbox_create", map[string]any{"name": "box", "ttl": "2h"}, &cr)
	if cr.Name != "agent-a1-box" || cr.Status != "running" || !cr.Created || cr.ID == "" || cr.ExpiresAt == "" || len(cr.Capabilities) == 0 {
		t.Fatalf("sandbox_create = %+v", cr)
	}
	mustCall(t, cs, "sandbox_create", map[string]any{"name": "box", "ttl": 7200}, &cr)
	if cr.Created || cr.Name != "agent-a1-box" {
		t.Fatalf("sandbox_create again = %+v; want the same sandbox, resumed", cr)
	}

	var ex struct {
		ExitCode int    `json:"exit_code"`
		TimedOut bool   `json:"timed_out"`
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
		Bytes    int64  `json:"stdout_bytes"`
	}
	mustCall(t, cs, "sandbox_exec", map[string]any{"sandbox": "box", "command": "echo $GREETING > f; cat f; echo oops >&2; exit 3", "env": map[string]string{"GREETING": "hi"}}, &ex)
	if ex.ExitCode != 3 || ex.Stdout != "hi\n" || ex.Stderr != "oops\n" || ex.Bytes != 3 || ex.TimedOut {
		t.Fatalf("sandbox_exec = %+v", ex)
	}
	mustCall(t, cs, "sandbox_exec", map[string]any{"sandbox": "box", "command": "sleep 5", "timeout": 0.2}, &ex)
	if !ex.TimedOut {
		t.Fatalf("sandbox_exec with a timeout = %+v; want timed_out", ex)
	}

	var ck struct {
		ID        string `json:"id"`
		Label     string `json:"label"`
		CreatedAt string `json:"created_at"`
	}
	mustCall(t, cs, "sandbox_checkpoint", map[string]any{"sandbox": "box", "label": "before"}, &ck)
	if ck.ID == "" || ck.Label != "before" || ck.CreatedAt == "" {
		t.Fatalf("sandbox_checkpoint = %+v", ck)
	}
	mustCall(t, cs, "sandbox_exec", map[string]any{"sandbox": "box", "command": "echo changed > f"}, nil)
	var rs struct{ Status string }
	mustCall(t, cs, "sandbox_restore", map[string]any{"sandbox": "box", "checkpoint": ck.ID}, &rs)
	if rs.Status != "running" {
		t.Fatalf("sandbox_restore = %+v", rs)
	}
	mustCall(t, cs, "sandbox_exec", map[string]any{"sandbox": "box", "command": "cat f"}, &ex)
	if ex.Stdout != "hi\n" {
		t.Fatalf("f after restore = %q; want the checkpoint's", ex.Stdout)
	}

	mustCall(t, cs, "sandbox_create", map[string]any{"name": "other"}, nil)
	var ls struct {
		Sandboxes []struct{ Name, Status string }
		Usage     struct {
			Summary     string
			Used, Limit int
		}
	}
	mustCall(t, cs, "sandbox_list", map[string]any{"filter": "bo"}, &ls)
	if len(ls.Sandboxes) != 1 || ls.Sandboxes[0].Name != "agent-a1-box" || ls.Usage.Summary != "2 of 2 sandboxes" || ls.Usage.Used != 2 || ls.Usage.Limit != quota {
		t.Fatalf("sandbox_list(bo) = %+v", ls)
	}
	mustCall(t, e.connect(t, agentA2, nil), "sandbox_list", nil, &ls)
	if len(ls.Sandboxes) != 0 || ls.Usage.Summary != "0 of 2 sandboxes" {
		t.Fatalf("sandbox_list as a2 = %+v; want none of a1's", ls)
	}

	// An operator sees a tenant's sandbox as TENANT/NAME, the name that
	// reaches it (names are unique per tenant), and reaches it so.
	operator := sandbox.Principal{Tenant: sandbox.SystemTenant, Agent: "operator", Role: sandbox.RoleOperator}
	ops := e.connect(t, operator, nil)
	mustCall(t, ops, "sandbox_list", map[string]any{"filter": "t1/agent-a1-b"}, &ls)
	if len(ls.Sandboxes) != 1 || ls.Sandboxes[0].Name != "t1/agent-a1-box" {
		t.Fatalf("sandbox_list(t1/agent-a1-b) as operator = %+v", ls)
	}
	mustCall(t, ops, "sandbox_exec", map[string]any{"sandbox": "t1/agent-a1-box", "command": "cat f"}, &ex)
	if ex.Stdout != "hi\n" {
		t.Fatalf("sandbox_exec(t1/agent-a1-box) as operator = %+v", ex)
	}
	if res := call(t, ops, "sandbox_exec", map[string]any{"sandbox": "agent-a1-box", "command": "true"}, nil); !res.IsError ||
		!strings.Contains(text(res), "tenant t1 has a sandbox of that name") {
		t.Fatalf("sandbox_exec(agent-a1-box) as operator = %s; want not_found naming t1", text(res))
	}

	mustCall(t, cs, "sandbox_destroy", map[string]any{"sandbox": "box"}, nil)
	mustCall(t, cs, "sandbox_list", nil, &ls)
	if len(ls.Sandboxes) != 1 || ls.Sandboxes[0].Name != "agent-a1-other" {
		t.Fatalf("sandbox_list after destroy = %+v", ls)
	}
}

// TestErrors checks that lifecycle's errors are error results whose text
// is sandbox.Error.Text, the CLI's words, and whose structured content is
// the API's error object with its numbers.
func TestErrors(t *testing.T) {
	e := newEnv(t, mcpserver.Options{})
	cs := e.connect(t, agentA1, nil)
	for i := range quota {
		mustCall(t, cs, "sandbox_create", map[string]any{"name": "b" + strconv.Itoa(i)}, nil)
	}
	for _, tc := range []struct {
		tool string
		args map[string]any
		code sandbox.Code
		text string
	}{
		{"sandbox_create", map[string]any{"name": "b9"}, sandbox.CodeQuotaExceeded,
			"error: quota exceeded: 2 of 2 sandboxes in use for agent-a1\nhint: destroy one or wait\n"},
		{"sandbox_exec", map[string]any{"sandbox": "nope", "command": "true"}, sandbox.CodeNotFound, ""},
		{"sandbox_destroy", map[string]any{"sandbox": "nope"}, sandbox.CodeNotFound, ""},
		{"sandbox_checkpoint", map[string]any{"sandbox": "nope"}, sandbox.CodeNotFound, ""},
		{"sandbox_restore", map[string]any{"sandbox": "b0", "checkpoint": "c-nope"}, sandbox.CodeNotFound, ""},
		{"sandbox_create", map[string]any{"name": "Bad Name!"}, sandbox.CodeInvalidArgument, ""},
		{"sandbox_exec", map[string]any{"sandbox": "b0", "command": ""}, sandbox.CodeInvalidArgument, ""},
		{"sandbox_exec", map[string]any{"sandbox": "b0", "command": "true", "timeout": "soon"}, sandbox.CodeInvalidArgument,
			"error: invalid duration \"soon\"\nhint: use a string such as \"90s\" or \"1h30m\"\n"},
		// Arguments the input schema refuses are refused before the tool runs.
		{"sandbox_exec", map[string]any{"sandbox": "b0"}, sandbox.CodeInvalidArgument, ""},
		{"sandbox_create", map[string]any{"name": 42}, sandbox.CodeInvalidArgument, ""},
	} {
		var te toolError
		res := call(t, cs, tc.tool, tc.args, &te)
		if !res.IsError || te.Code != tc.code {
			t.Errorf("%s(%v) = %v %s %+v; want error %s", tc.tool, tc.args, res.IsError, text(res), te, tc.code)
			continue
		}
		want := (&sandbox.Error{Code: te.Code, Message: te.Message, Hint: te.Hint}).Text()
		if tc.text != "" && want != tc.text {
			t.Errorf("%s(%v) structured = %+v; want the words %q", tc.tool, tc.args, te, tc.text)
		}
		if got := text(res); got != want {
			t.Errorf("%s(%v) text = %q; want %q (its structured error's Text)", tc.tool, tc.args, got, want)
		}
		if te.Code == sandbox.CodeQuotaExceeded && (te.Details["limit"] != 2.0 || te.Details["used"] != 2.0) {
			t.Errorf("quota error details = %v; want limit 2 and used 2", te.Details)
		}
	}
	// An unknown tool is a protocol problem.
	if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "sandbox_fork"}); err == nil {
		t.Error("calling an unknown tool succeeded; want a protocol error")
	}
}

// TestExecProgress checks that a command's output arrives as progress
// notifications while it runs.
func TestExecProgress(t *testing.T) {
	e := newEnv(t, mcpserver.Options{})
	var (
		mu     sync.Mutex
		chunks []string
		first  = make(chan struct{})
	)
	cs := e.connect(t, agentA1, func(p *mcp.ProgressNotificationParams) {
		mu.Lock()
		defer mu.Unlock()
		if p.ProgressToken != "tok" {
			t.Errorf("progress token = %v", p.ProgressToken)
		}
		if len(chunks) == 0 {
			close(first)
		}
		chunks = append(chunks, p.Meta["stream"].(string)+":"+p.Message)
	})
	mustCall(t, cs, "sandbox_create", map[string]any{"name": "box"}, nil)
	done := make(chan *mcp.CallToolResult)
	go func() {
		params := &mcp.CallToolParams{Name: "sandbox_exec", Arguments: map[string]any{"sandbox": "box", "command": "echo one; echo two >&2; sleep 1; echo three"}}
		params.SetProgressToken("tok")
		res, err := cs.CallTool(context.Background(), params)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	select {
	case <-first:
	case <-done:
		t.Fatal("the command ended before any progress notification arrived")
	case <-time.After(10 * time.Second):
		t.Fatal("no progress notification")
	}
	<-done
	// The client handles notifications concurrently with the result, so
	// the last one may reach the handler just after the result did.
	var got string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		got = strings.Join(chunks, "|")
		mu.Unlock()
		if strings.Contains(got, "stdout:three\n") || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range []string{"stdout:one\n", "stderr:two\n", "stdout:three\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("progress = %q; want it to carry %q", got, want)
		}
	}
}

// TestExecCancel checks that cancelling the request kills the command at
// once, not after the default grace.
func TestExecCancel(t *testing.T) {
	e := newEnv(t, mcpserver.Options{})
	cs := e.connect(t, agentA1, nil)
	mustCall(t, cs, "sandbox_create", map[string]any{"name": "box"}, nil)
	pidFile := filepath.Join(e.home(t, agentA1, "box"), "pid")
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sandbox_exec", Arguments: map[string]any{"sandbox": "box", "command": "echo $$ > pid; exec sleep 60"}})
		errc <- err
	}()
	var pid int
	for deadline := time.Now().Add(10 * time.Second); pid == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the command did not start")
		}
		b, _ := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	cancel()
	if err := <-errc; err == nil {
		t.Error("the cancelled call returned no error")
	}
	for deadline := time.Now().Add(3 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("sleep 60 (pid %d) still runs 3s after the request was cancelled", pid)
		}
	}
	// The session goes on.
	mustCall(t, cs, "sandbox_list", nil, nil)
}

// TestExecTruncation checks that output over the cap is cut to head and
// tail around a marker, with the totals, and saved whole in the sandbox.
func TestExecTruncation(t *testing.T) {
	e := newEnv(t, mcpserver.Options{MaxOutputBytes: 1000})
	cs := e.connect(t, agentA1, nil)
	mustCall(t, cs, "sandbox_create", map[string]any{"name": "box"}, nil)
	var ex struct {
		Stdout      string `json:"stdout"`
		Stderr      string `json:"stderr"`
		StdoutBytes int64  `json:"stdout_bytes"`
		StderrBytes int64  `json:"stderr_bytes"`
		Truncated   bool   `json:"truncated"`
		StdoutFile  string `json:"stdout_file"`
		StderrFile  string `json:"stderr_file"`
	}
	mustCall(t, cs, "sandbox_exec", map[string]any{"sandbox": "box", "command": "seq 1 20000; echo short >&2"}, &ex)
	var full strings.Builder
	for i := 1; i <= 20000; i++ {
		full.WriteString(strconv.Itoa(i) + "\n")
	}
	if !ex.Truncated || ex.StdoutBytes != int64(full.Len()) || ex.Stderr != "short\n" || ex.StderrBytes != 6 || ex.StderrFile != "" {
		t.Fatalf("exec = truncated %v, %d/%d bytes, stderr %q, file %q", ex.Truncated, ex.StdoutBytes, ex.StderrBytes, ex.Stderr, ex.StderrFile)
	}
	if !strings.HasPrefix(ex.StdoutFile, "/home/sandbox/.hearth/exec-") || !strings.HasSuffix(ex.StdoutFile, ".stdout") {
		t.Fatalf("stdout_file = %q", ex.StdoutFile)
	}
	head, tail := full.String()[:500], full.String()[full.Len()-500:]
	marker := "\n[… " + strconv.Itoa(full.Len()-1000) + " bytes cut; full output in " + ex.StdoutFile + " …]\n"
	if ex.Stdout != head+marker+tail {
		t.Errorf("stdout = %q…%q; want the head, %q and the tail", ex.Stdout[:40], ex.Stdout[len(ex.Stdout)-40:], marker)
	}
	saved, err := os.ReadFile(filepath.Join(e.home(t, agentA1, "box"), strings.TrimPrefix(ex.StdoutFile, "/home/sandbox/")))
	if err != nil || string(saved) != full.String() {
		t.Errorf("the saved output = %d bytes, %v; want the %d bytes of the whole stream", len(saved), err, full.Len())
	}
}

// TestPanic checks that a panicking tool is an internal error result and
// the server keeps serving.
func TestPanic(t *testing.T) {
	e := newEnv(t, mcpserver.Options{})
	srv := e.srv.For(agentA1)
	srv.AddTool(&mcp.Tool{Name: "boom", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		panic("boom")
	})
	cs := connectTo(t, srv, nil)
	var te toolError
	res := call(t, cs, "boom", nil, &te)
	if !res.IsError || te.Code != sandbox.CodeInternal || text(res) != sandbox.AsError(errors.New("any")).Text() {
		t.Fatalf("a panicking tool = %v %q %+v; want an internal error result", res.IsError, text(res), te)
	}
	mustCall(t, cs, "sandbox_list", nil, nil)
}

// TestToolList checks the eight tools, their annotations and schemas, and
// the size of tools/list, which is context in every conversation.
func TestToolList(t *testing.T) {
	e := newEnv(t, mcpserver.Options{})
	cs := e.connect(t, agentA1, nil)
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res)
	t.Logf("tools/list: %d bytes", len(b))
	// Measured at 6773 bytes (eight tools with their input and output
	// schemas, each output schema also admitting {"error": {...}}, 108
	// bytes a tool; the two image tools cost 1535); the margin is for the
	// SDK's envelope, not for new words.
	const maxBytes = 7100
	if len(b) > maxBytes {
		t.Errorf("tools/list is %d bytes; keep it under %d", len(b), maxBytes)
	}
	type hints struct{ readOnly, destructive, idempotent bool }
	want := map[string]hints{
		"sandbox_create":     {false, false, true},
		"sandbox_exec":       {false, true, false},
		"sandbox_checkpoint": {false, false, false},
		"sandbox_restore":    {false, true, false},
		"sandbox_destroy":    {false, true, true},
		"sandbox_list":       {true, false, true},
		"image_list":         {true, false, true},
		"image_pull":         {false, false, true},
	}
	if len(res.Tools) != len(want) {
		t.Errorf("%d tools; want %d", len(res.Tools), len(want))
	}
	for _, tool := range res.Tools {
		w, ok := want[tool.Name]
		a := tool.Annotations
		if !ok || a == nil || a.DestructiveHint == nil {
			t.Errorf("tool %s: unexpected, or annotations %+v", tool.Name, a)
			continue
		}
		if got := (hints{a.ReadOnlyHint, *a.DestructiveHint, a.IdempotentHint}); got != w {
			t.Errorf("tool %s hints = %+v; want %+v", tool.Name, got, w)
		}
		if tool.InputSchema == nil || tool.OutputSchema == nil {
			t.Errorf("tool %s has no input or output schema", tool.Name)
		}
	}
}
