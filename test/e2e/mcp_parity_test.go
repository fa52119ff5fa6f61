package e2e_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hearth/hearth/sandbox"
)

// parityCase is one failing request through both doors: the MCP tool
// call, and the CLI's command line, as token.
type parityCase struct {
	code  sandbox.Code
	token string
	tool  string
	args  map[string]any
	cli   []string
	// timed: the hint names a remaining time, which moves between the
	// two calls; the message must still match word for word.
	timed bool
}

// TestMCPParity holds the MCP door and the CLI to the same words: the same
// failing request through both yields the same code and, word for word,
// the text the CLI prints. It enumerates both sides, so that a tool or an
// error code cannot be added to one door alone: every tool in tools/list
// needs a case, and every code in sandbox.Codes either a case or a reason
// why no tool can meet it.
func TestMCPParity(t *testing.T) {
	requireDaemon(t)
	d := newDaemon(t, bins.Runtimes[0])
	ctx := ctxT(t)
	op := d.Client()
	tenant := func(name string, milliCPU int64, o sandbox.PolicyOverrides) {
		t.Helper()
		if _, err := op.Admin().CreateTenant(ctx, sandbox.Tenant{Name: name, Policy: o,
			Allocation: sandbox.Resources{MilliCPU: milliCPU, MemoryBytes: 1 << 40, DiskBytes: 1 << 42}}); err != nil {
			t.Fatal(err)
		}
	}
	token := func(tenant, agent string) string {
		t.Helper()
		if _, err := op.Admin().CreateAgent(ctx, sandbox.Agent{Name: agent, Tenant: tenant}); err != nil {
			t.Fatal(err)
		}
		tok, _, err := op.Admin().CreateToken(ctx, sandbox.TokenRequest{Tenant: tenant, Agent: agent})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	one := 1
	tenant("acme", 400_000, sandbox.PolicyOverrides{AgentQuota: &one})
	bot := token("acme", "bot")
	// tight: a budget of one small sandbox, which tight-1 takes.
	tenant("tight", 4000, sandbox.PolicyOverrides{})
	tight1, tight2 := token("tight", "tight-1"), token("tight", "tight-2")
	// fast: the breaker opens at the second create in a minute, for a day.
	day := sandbox.Duration(24 * time.Hour)
	tenant("fast", 400_000, sandbox.PolicyOverrides{AlarmCreatesPerMinute: &one, BreakerFactor: &one, BreakerCooldown: &day})
	fast := token("fast", "fast-1")

	if out, errOut, code := d.CLIAs(bot, "", "create", "box"); code != 0 {
		t.Fatalf("hearth create box as bot = %d %q %q", code, out, errOut)
	}
	if out, errOut, code := d.CLIAs(tight1, "", "create", "job"); code != 0 {
		t.Fatalf("hearth create job as tight-1 = %d %q %q", code, out, errOut)
	}
	if out, errOut, code := d.CLIAs(fast, "", "create", "first"); code != 0 {
		t.Fatalf("hearth create first as fast-1 = %d %q %q", code, out, errOut)
	}

	cases := []parityCase{
		{sandbox.CodeQuotaExceeded, bot, "sandbox_create", map[string]any{"name": "box2"}, []string{"create", "box2"}, false},
		{sandbox.CodeBudgetExceeded, tight2, "sandbox_create", map[string]any{"name": "job"}, []string{"create", "job"}, false},
		{sandbox.CodeCircuitOpen, fast, "sandbox_create", map[string]any{"name": "second"}, []string{"create", "second"}, true},
		{sandbox.CodeNotFound, bot, "sandbox_destroy", map[string]any{"sandbox": "nosuch"}, []string{"destroy", "nosuch"}, false},
		{sandbox.CodeNotFound, bot, "sandbox_exec", map[string]any{"sandbox": "nosuch", "command": "true"}, []string{"exec", "nosuch", "--", "true"}, false},
		{sandbox.CodeNotFound, bot, "sandbox_checkpoint", map[string]any{"sandbox": "nosuch"}, []string{"checkpoint", "nosuch"}, false},
		{sandbox.CodeNotFound, bot, "sandbox_restore", map[string]any{"sandbox": "box", "checkpoint": "c0000000000000000"}, []string{"restore", "box", "c0000000000000000"}, false},
		{sandbox.CodeInvalidArgument, bot, "sandbox_create", map[string]any{"name": "Bad_Name"}, []string{"create", "Bad_Name"}, false},
		{sandbox.CodeInvalidArgument, bot, "sandbox_create", map[string]any{"size": "huge"}, []string{"create", "--size", "huge"}, false},
		{sandbox.CodeInvalidArgument, bot, "sandbox_exec", map[string]any{"sandbox": "box", "command": "true", "secrets": []string{"not-a-name"}}, []string{"exec", "box", "--secret", "not-a-name", "--", "true"}, false},
		{sandbox.CodeInvalidArgument, bot, "sandbox_checkpoint", map[string]any{"sandbox": "box", "label": "a\tb"}, []string{"checkpoint", "box", "--label", "a\tb"}, false},
		{sandbox.CodeInvalidArgument, bot, "image_pull", map[string]any{"ref": "Bad_Ref"}, []string{"image", "pull", "Bad_Ref"}, false},
		// An agent may not have the daemon pull from loopback without its
		// tenant's login for the registry (nothing listens there).
		{sandbox.CodePermissionDenied, bot, "image_pull", map[string]any{"ref": "127.0.0.1:1/app:1"}, []string{"image", "pull", "127.0.0.1:1/app:1"}, false},
	}
	// The codes no tool can meet, and why.
	unreachable := map[sandbox.Code]string{
		sandbox.CodeUnauthenticated:    "refused by the transport (401) before any tool runs",
		sandbox.CodeFailedPrecondition: "only an image's removal (no tool) and an insecure pull of a host whose login requires TLS (image_pull has no insecure) refuse so",
		sandbox.CodeAlreadyExists:      "an agent's sandbox names carry its own prefix, which no other sandbox can hold",
		sandbox.CodeTooLarge:           "sandbox_exec refuses a command over 256 KiB, but the CLI streams such a script after its request (shell_size): it has no such limit to meet",
		sandbox.CodeRateLimited:        "the connection and session limits refuse at the transport (429) before any tool runs; the create rate opens the breaker (circuit_open)",
		sandbox.CodeTimeout:            "a command's timeout is a result (timed_out), not an error",
		sandbox.CodeUnavailable:        "a runtime that fails or a checkpoint that fails before a destructive command: not reproducible on demand here",
		sandbox.CodeInternal:           "a bug",
	}
	// sandbox_list and image_list take nothing that can be wrong; the first
	// is held to the CLI by its success below.
	listed := map[string]bool{"sandbox_list": true, "image_list": true}
	sessions := map[string]*mcp.ClientSession{}
	for _, tc := range cases {
		cs := sessions[tc.token]
		if cs == nil {
			cs = mcpConnect(t, d, tc.token, nil)
			sessions[tc.token] = cs
		}
		var te struct {
			Code sandbox.Code `json:"code"`
		}
		res := callTool(t, cs, tc.tool, tc.args, &te)
		_, stderr, code := d.CLIAs(tc.token, "", tc.cli...)
		mcpWords, cliWords := mcpText(res), stderr
		if tc.timed {
			mcpWords, cliWords = strings.Split(mcpWords, "\nhint:")[0], strings.Split(cliWords, "\nhint:")[0]
		}
		if !res.IsError || te.Code != tc.code || code != tc.code.ExitCode() || mcpWords != cliWords {
			t.Errorf("%s %v: MCP %v %s %q; CLI hearth %s: %d %q; want %s in the same words",
				tc.tool, tc.args, res.IsError, te.Code, mcpText(res), strings.Join(tc.cli, " "), code, stderr, tc.code)
		}
		listed[tc.tool] = true
	}

	tools, err := sessions[bot].ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if !listed[tool.Name] {
			t.Errorf("tool %s has no parity case: add one, so that it cannot drift from the CLI", tool.Name)
		}
	}
	for _, code := range sandbox.Codes() {
		covered := slices.ContainsFunc(cases, func(c parityCase) bool { return c.code == code })
		if _, why := unreachable[code]; covered == why {
			t.Errorf("code %s: covered by a case %v, listed unreachable %v; want exactly one", code, covered, why)
		}
	}

	// sandbox_list and `hearth list` name the same sandboxes.
	var ls struct {
		Sandboxes []struct{ Name string }
	}
	callTool(t, sessions[bot], "sandbox_list", nil, &ls)
	out, _, _ := d.CLIAs(bot, "", "list")
	if len(ls.Sandboxes) != 1 || !strings.Contains(out, ls.Sandboxes[0].Name) {
		t.Errorf("sandbox_list = %+v; hearth list = %q; want the same sandbox", ls, out)
	}
}
