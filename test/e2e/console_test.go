package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
)

// browser is a headless Chromium the test drives over the DevTools
// protocol, started; its context ends with the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("the console's tests need Debian's chromium: %v", err)
	}
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancel2)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// do runs steps in the browser, a minute at most.
func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(tctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// screenshot saves the page as name.png in the console's artifacts
// directory ($HEARTH_ARTIFACTS/console, else artifacts/console in the
// checkout), which docs/CONSOLE.md links to.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("HEARTH_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "..", "artifacts")
	}
	dir = filepath.Join(dir, "console")
	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	png, err := chromedp.Run(tctx, chromedp.FullScreenshot(100)) // 100: a PNG
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitText waits until the element with id shows want.
func waitText(t *testing.T, ctx context.Context, id, want string) {
	t.Helper()
	var got string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		text, err := chromedp.Run(tctx, chromedp.Text(chromedp.ID(id)))
		cancel()
		if got = text; err == nil && strings.Contains(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("#%s never showed %q; it shows %q (%v)", id, want, got, err)
		}
	}
}

// typeText types text into the focused element as a keyboard's input
// (Input.insertText: one input event per call, as a terminal gets from a
// paste; dispatched characters reach xterm.js twice, as keydown and
// keypress). Enter is a key event of its own.
func typeText(text string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, input.InsertText, input.InsertTextParams{Text: text})
		return err
	})
}

// signIn signs the console in with token and waits for the list.
func signIn(t *testing.T, ctx context.Context, url, token string) {
	t.Helper()
	do(t, ctx,
		chromedp.Navigate(url+"/console/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitReady(chromedp.ID("sandboxes")),
	)
}

// TestConsole drives the web console in a real browser (headless
// Chromium): an operator signs in with a token and sees a sandbox made
// through the API, then one made later appear without a reload; opens a
// sandbox's terminal and runs a command in it; uploads a file, which the
// API reads back; takes a checkpoint and restores it, which the API sees;
// makes a token, which works, and revokes it, which the API then refuses;
// finds those calls in the audit log; and an agent's token shows that
// agent's sandboxes only. The main pages are saved as screenshots.
func TestConsole(t *testing.T) {
	d := newDaemon(t, preferredRuntime(t))
	ctx := ctxT(t)
	cl := d.Client()
	if _, _, err := cl.Create(ctx, sandbox.CreateRequest{Name: "web"}); err != nil {
		t.Fatal(err)
	}
	agentTok := d.agentToken(t, "acme", "bot", 3)
	if _, _, err := client.New(d.URL, agentTok, nil).Create(ctx, sandbox.CreateRequest{Name: "mine"}); err != nil {
		t.Fatal(err)
	}
	// Another agent of the same tenant, whose sandbox bot must not see.
	if _, _, err := client.New(d.URL, d.agentToken(t, "acme", "other", 3), nil).Create(ctx, sandbox.CreateRequest{Name: "theirs"}); err != nil {
		t.Fatal(err)
	}

	// What the agents and tenants pages read, as the CLI reads it.
	out, stderr, code := d.CLI("", "limits", "--tenant", "acme", "--agent", "bot", "--json")
	var lim sandbox.LimitsReport
	if err := json.Unmarshal([]byte(out), &lim); code != 0 || err != nil || lim.Sandboxes == nil || lim.Sandboxes.Used != 1 || lim.Agent != "bot" {
		t.Errorf("hearth limits --tenant acme --agent bot = %d %q %q; want bot's one sandbox", code, out, stderr)
	}
	if _, _, code := d.CLIAs(agentTok, "", "limits", "--tenant", "system"); code != sandbox.CodeNotFound.ExitCode() {
		t.Errorf("an agent's hearth limits --tenant system = exit %d; want not_found", code)
	}

	b := browser(t)
	signIn(t, b, d.URL, d.Token)
	waitText(t, b, "sandboxes", "system/web")
	if _, _, err := cl.Create(ctx, sandbox.CreateRequest{Name: "later"}); err != nil {
		t.Fatal(err)
	}
	waitText(t, b, "sandboxes", "system/later")
	waitText(t, b, "sandboxes", "acme/agent-other-theirs") // an operator sees every tenant's
	screenshot(t, b, "sandboxes")

	// The terminal: a login shell on the exec core.
	do(t, b, chromedp.Navigate(d.URL+"/console/#/sb/system%2Fweb/terminal"))
	waitText(t, b, "terminal-state", "connected")
	do(t, b, chromedp.Focus(chromedp.CSS(".xterm-helper-textarea")), typeText("echo con$((40+2))sole"), chromedp.KeyEvent("\r"))
	waitText(t, b, "terminal", "con42sole")
	screenshot(t, b, "terminal")

	// Files: an upload the API reads back.
	local := filepath.Join(t.TempDir(), "hello.txt")
	os.WriteFile(local, []byte("uploaded through the console\n"), 0o644)
	do(t, b,
		chromedp.Navigate(d.URL+"/console/#/sb/system%2Fweb/files"),
		chromedp.WaitReady(chromedp.ID("upload")),
		chromedp.SetUploadFiles(chromedp.ID("upload"), []string{local}),
		chromedp.Click(chromedp.ID("upload-button")),
	)
	waitText(t, b, "upload-state", "uploaded /home/sandbox/hello.txt")
	var got bytes.Buffer
	if err := cl.ReadFile(ctx, "web", "/home/sandbox/hello.txt", &got); err != nil || got.String() != "uploaded through the console\n" {
		t.Errorf("the uploaded file read through the API = %q, %v", got.String(), err)
	}
	waitText(t, b, "files", "hello.txt")
	screenshot(t, b, "files")

	// Checkpoints: take one, change the file, restore it.
	do(t, b,
		chromedp.Navigate(d.URL+"/console/#/sb/system%2Fweb/checkpoints"),
		chromedp.WaitReady(chromedp.ID("ck-label")),
		chromedp.SendKeys(chromedp.ID("ck-label"), "from the console"),
		chromedp.Click(chromedp.ID("ck-take")),
	)
	waitText(t, b, "checkpoints", "from the console")
	cks, err := cl.ListCheckpoints(ctx, "web")
	if err != nil || len(cks) != 1 || cks[0].Label != "from the console" {
		t.Fatalf("checkpoints through the API = %+v, %v; want the console's", cks, err)
	}
	if _, err := cl.WriteFile(ctx, "web", sandbox.WriteRequest{Path: "/home/sandbox/hello.txt"}, strings.NewReader("changed\n")); err != nil {
		t.Fatal(err)
	}
	screenshot(t, b, "checkpoints")
	do(t, b, chromedp.Click(chromedp.CSS("#checkpoints .restore")))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		got.Reset()
		sb, gerr := cl.Get(ctx, "web")
		if cl.ReadFile(ctx, "web", "/home/sandbox/hello.txt", &got) == nil && got.String() == "uploaded through the console\n" && gerr == nil && sb.Head == cks[0].ID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Restore in the console the file holds %q (head %q); want the checkpoint's", got.String(), sb.Head)
		}
	}

	// Tokens: one made in the console works, revoked there it is refused.
	before, err := cl.Admin().ListTokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	do(t, b,
		chromedp.Navigate(d.URL+"/console/#/tokens"),
		chromedp.WaitReady(chromedp.ID("token-agent")),
		chromedp.SendKeys(chromedp.ID("token-agent"), "bot"),
		chromedp.SendKeys(chromedp.ID("token-tenant"), "acme"),
		chromedp.Click(chromedp.ID("token-create")),
	)
	waitText(t, b, "token-secret", "hearth_")
	secret, err := chromedp.Run(b, chromedp.Text(chromedp.ID("token-secret")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.New(d.URL, secret, nil).List(ctx); err != nil {
		t.Errorf("the token made in the console is refused: %v", err)
	}
	screenshot(t, b, "tokens")
	infos, err := cl.Admin().ListTokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var made string
	for _, k := range infos {
		if !slices.ContainsFunc(before, func(o sandbox.TokenInfo) bool { return o.ID == k.ID }) {
			made = k.ID
		}
	}
	chromedp.Run(b, chromedp.Evaluate[any]("window.confirm = () => true"))
	do(t, b, chromedp.Click(chromedp.CSS(`#tokens tr[data-id="`+made+`"] .revoke`)))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if _, err := client.New(d.URL, secret, nil).List(ctx); sandbox.IsCode(err, sandbox.CodeUnauthenticated) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the token revoked in the console still works")
		}
	}
	// The audit log: the calls the console made are there.
	do(t, b, chromedp.Navigate(d.URL+"/console/#/audit"))
	waitText(t, b, "audit", "checkpoint.create")
	waitText(t, b, "audit", "token.revoke")
	screenshot(t, b, "audit")

	// Tenants and agents: the budget and quota each one uses.
	do(t, b, chromedp.Navigate(d.URL+"/console/#/agents"))
	waitText(t, b, "agents", "1 of 3") // bot and other: one sandbox each of a quota of 3
	screenshot(t, b, "agents")
	do(t, b, chromedp.Navigate(d.URL+"/console/#/tenants"))
	waitText(t, b, "tenants", "2 CPU, ") // acme's budget used: two small sandboxes
	screenshot(t, b, "tenants")

	// Why a sandbox went: destroyed through the API, the page says so.
	if err := cl.Destroy(ctx, "later"); err != nil {
		t.Fatal(err)
	}
	if out, _, code := d.CLI("", "gone"); code != 0 || !strings.Contains(out, "system/later") || !strings.Contains(out, "destroyed by") {
		t.Errorf("hearth gone = %d %q; want later, destroyed", code, out)
	}
	do(t, b, chromedp.Navigate(d.URL+"/console/#/gone"))
	waitText(t, b, "gone", "system/later")
	waitText(t, b, "gone", "destroyed by")
	screenshot(t, b, "gone")

	// An agent's token: its own sandboxes, no one else's.
	do(t, b, chromedp.Click(chromedp.ID("signout")))
	signIn(t, b, d.URL, agentTok)
	waitText(t, b, "sandboxes", "acme/agent-bot-mine")
	rows, err := chromedp.Run(b, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#sandboxes tr")].map(r => r.dataset.ref)`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rows, []string{"acme/agent-bot-mine"}) {
		t.Errorf("as the agent the console lists %q; want only acme/agent-bot-mine", rows)
	}
	// Nor another's gone sandboxes.
	do(t, b, chromedp.Navigate(d.URL+"/console/#/gone"))
	if text, err := chromedp.Run(b, chromedp.Text(chromedp.ID("gone"))); err != nil || strings.Contains(text, "later") {
		t.Errorf("the agent's gone page shows %q, %v; want nothing of the operator's", text, err)
	}
	screenshot(t, b, "agent")
}
