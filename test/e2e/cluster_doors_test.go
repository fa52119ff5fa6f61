package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/mcptest"
)

// TestSharedStoreDoors: every door of a daemon answers for a sandbox that
// another daemon of its store runs. A sandbox is created through A; then,
// through B only, the official Sprites JavaScript SDK (testdata's
// client.mjs's steps that fit a sandbox that already exists: get, list,
// exec with streams, stdin and a TTY, file write, read and list,
// checkpoint and restore, the network policy), a real MCP client
// (sandbox_exec, sandbox_checkpoint, sandbox_restore, sandbox_list) and
// the native exec WebSocket with stdin work on it, and A sees every effect.
// A forwarded call is audited once, by the node that serves it.
func TestSharedStoreDoors(t *testing.T) {
	ds := sharedDaemons(t, 2)
	a, b := ds[0], ds[1]
	ctx := ctxT(t)
	ca := a.Client()
	if _, _, err := ca.Create(ctx, sandbox.CreateRequest{Name: "web"}); err != nil {
		t.Fatal(err)
	}
	if sb, err := b.Client().Get(ctx, "web"); err != nil || sb.Node != "n0" {
		t.Fatalf("Get(web) through b = node %q, %v; want the sandbox of n0", sb.Node, err)
	}

	t.Run("sprites", func(t *testing.T) {
		node, prefix := npmPackages(t, "HEARTH_SPRITES_JS", "sprites-js", "@fly/sprites")
		stamp := fmt.Sprint(time.Now().UnixNano())
		c := spritesCase{
			Sprite:   "web",
			FromA:    spritesFile{Path: "/home/sandbox/from-a.txt", Text: "written through a " + stamp + "\n"},
			ToA:      spritesFile{Path: "/home/sandbox/sdk/from-b.txt", Text: "written by the SDK through b " + stamp + "\n"},
			ExecToA:  spritesFile{Path: "/home/sandbox/sdk-exec.txt", Text: "exec'd by the SDK through b " + stamp},
			State:    "/home/sandbox/state.txt",
			Comment:  "sdk through b " + stamp,
			AllowDNS: "api.example.com",
		}
		if _, err := ca.WriteFile(ctx, "web", sandbox.WriteRequest{Path: c.FromA.Path}, strings.NewReader(c.FromA.Text)); err != nil {
			t.Fatalf("write %s through a: %v", c.FromA.Path, err)
		}
		runSpritesScript(t, node, prefix, b, c)

		for _, f := range []spritesFile{c.FromA, c.ToA, {Path: c.ExecToA.Path, Text: c.ExecToA.Text + "\n"}, {Path: c.State, Text: "before\n"}} {
			if got := readThrough(t, ctx, a, "web", f.Path); got != f.Text {
				t.Errorf("%s read through a after the SDK ran through b = %q, want %q", f.Path, got, f.Text)
			}
		}
		cks, err := ca.ListCheckpoints(ctx, "web")
		if err != nil || !slices.ContainsFunc(cks, func(ck sandbox.Checkpoint) bool { return ck.Label == c.Comment }) {
			t.Errorf("ListCheckpoints(web) through a = %+v, %v; want the SDK's checkpoint labelled %q", cks, err, c.Comment)
		}
		if sb, err := ca.Get(ctx, "web"); err != nil || !slices.Equal(sb.Egress.Allow, []string{c.AllowDNS}) {
			t.Errorf("Get(web) through a after the SDK set the network policy through b = egress %+v, %v; want allow [%s]", sb.Egress, err, c.AllowDNS)
		}
	})

	t.Run("mcp", func(t *testing.T) {
		cs := mcptest.Connect(t, ctx, b.URL+"/mcp", b.Token, nil)
		since := time.Now().Add(-time.Second)
		var ex struct {
			ExitCode int    `json:"exit_code"`
			Stdout   string `json:"stdout"`
		}
		res := callTool(t, cs, "sandbox_exec", map[string]any{"sandbox": "web", "command": "echo hi > /home/sandbox/m.txt; cat /home/sandbox/m.txt"}, &ex)
		if res.IsError || ex.ExitCode != 0 || ex.Stdout != "hi\n" {
			t.Fatalf("sandbox_exec through b = error %v, %+v (%s); want exit 0 and stdout hi", res.IsError, ex, mcpText(res))
		}
		if got := readThrough(t, ctx, a, "web", "/home/sandbox/m.txt"); got != "hi\n" {
			t.Fatalf("m.txt read through a after sandbox_exec through b = %q, want hi", got)
		}
		// b forwarded the call to a, which ran and audited it; b must not
		// audit it too.
		events := auditedSince(t, ctx, ds, since, "sandbox.exec", sandbox.DoorMCP, "web")
		if len(events) != 1 || events[0].Code != "" || events[0].Role != sandbox.RoleOperator || events[0].TokenID == "" {
			t.Fatalf("audit events of the one sandbox_exec through b = %+v; want exactly one, a success by the operator's token", events)
		}

		var ck struct {
			ID    string `json:"id"`
			Label string `json:"label"`
		}
		if res := callTool(t, cs, "sandbox_checkpoint", map[string]any{"sandbox": "web", "label": "mcp-through-b"}, &ck); res.IsError || ck.ID == "" {
			t.Fatalf("sandbox_checkpoint through b = error %v, %+v (%s)", res.IsError, ck, mcpText(res))
		}
		cks, err := ca.ListCheckpoints(ctx, "web")
		if err != nil || !slices.ContainsFunc(cks, func(c sandbox.Checkpoint) bool { return c.ID == ck.ID && c.Label == "mcp-through-b" }) {
			t.Fatalf("ListCheckpoints(web) through a = %+v, %v; want %s, labelled mcp-through-b, made by sandbox_checkpoint through b", cks, err, ck.ID)
		}
		if _, err := ca.WriteFile(ctx, "web", sandbox.WriteRequest{Path: "/home/sandbox/m.txt"}, strings.NewReader("changed\n")); err != nil {
			t.Fatal(err)
		}
		var rs struct {
			Name   string `json:"name"`
			Status string `json:"status"`
		}
		if res := callTool(t, cs, "sandbox_restore", map[string]any{"sandbox": "web", "checkpoint": ck.ID}, &rs); res.IsError || rs.Name != "web" || rs.Status != string(sandbox.StatusRunning) {
			t.Fatalf("sandbox_restore through b = error %v, %+v (%s); want web running", res.IsError, rs, mcpText(res))
		}
		if got := readThrough(t, ctx, a, "web", "/home/sandbox/m.txt"); got != "hi\n" {
			t.Fatalf("m.txt read through a after sandbox_restore through b = %q, want the checkpoint's hi", got)
		}

		var ls struct {
			Sandboxes []struct{ Name, Status string }
		}
		if res := callTool(t, cs, "sandbox_list", nil, &ls); res.IsError || len(ls.Sandboxes) != 1 || ls.Sandboxes[0].Name != "web" || ls.Sandboxes[0].Status != string(sandbox.StatusRunning) {
			t.Fatalf("sandbox_list through b = error %v, %+v (%s); want web, running", res.IsError, ls, mcpText(res))
		}
	})

	t.Run("exec", func(t *testing.T) {
		since := time.Now().Add(-time.Second)
		var stdout, stderr bytes.Buffer
		res, err := b.Client().Exec(ctx, "web", sandbox.ExecRequest{Argv: []string{"cat"}}, strings.NewReader("abc"), &stdout, &stderr)
		if err != nil || res.ExitCode != 0 || stdout.String() != "abc" {
			t.Fatalf("Exec(web, cat) through b with stdin abc = %+v, %v, stdout %q, stderr %q; want exit 0 and abc", res, err, stdout.String(), stderr.String())
		}
		events := auditedSince(t, ctx, ds, since, "sandbox.exec", sandbox.DoorAPI, "web")
		if len(events) != 1 || events[0].Status != 101 || events[0].Code != "" {
			t.Fatalf("audit events of the one exec through b = %+v; want exactly one, a success (101)", events)
		}
	})

	list, err := b.Client().List(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "web" || list[0].Node != "n0" {
		t.Fatalf("List through b at the end = %+v, %v; want web alone, on n0", list, err)
	}
}

// spritesCase is what runSpritesScript's script does on an existing
// sprite, and what the test then checks through the other node.
type spritesCase struct {
	// Sprite is the sandbox's name.
	Sprite string `json:"sprite"`
	// FromA was written through the node that runs the sprite: the script
	// reads it with exec and fs.
	FromA spritesFile `json:"from_a"`
	// ToA is written by the script with fs, ExecToA (plus a newline) with
	// exec, for the test to read through the other node.
	ToA     spritesFile `json:"to_a"`
	ExecToA spritesFile `json:"exec_to_a"`
	// State is the file the script checkpoints (with Comment) as
	// "before\n", changes, and restores.
	State   string `json:"state"`
	Comment string `json:"comment"`
	// AllowDNS is the one domain the network policy the script sets allows.
	AllowDNS string `json:"allow_dns"`
}

type spritesFile struct {
	Path string `json:"path"`
	Text string `json:"text"`
}

// runSpritesScript runs spritesOnExisting with Node against d's Sprites
// API with d's operator token, failing t with the step that failed.
func runSpritesScript(t *testing.T, node, prefix string, d *daemon, c spritesCase) {
	t.Helper()
	script := filepath.Join(t.TempDir(), "existing.mjs")
	if err := os.WriteFile(script, []byte(spritesOnExisting), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	runNodeScript(t, node, script, 10*time.Minute,
		"HEARTH_SPRITES_URL="+d.URL, "HEARTH_TOKEN="+d.Token, "HEARTH_SPRITES_JS="+prefix, "HEARTH_CASE="+string(spec))
}

// readThrough returns the content of path in the sandbox name, read
// through d's native API.
func readThrough(t *testing.T, ctx context.Context, d *daemon, name, path string) string {
	t.Helper()
	var buf bytes.Buffer
	if err := d.Client().ReadFile(ctx, name, path, &buf); err != nil {
		t.Fatalf("ReadFile(%s, %s) through %s: %v", name, path, d.URL, err)
	}
	return buf.String()
}

// auditedSince returns the audit events of the store at or after since
// of verb through door on the sandbox name, once every node of ds has
// appended what it recorded before the call: each node is asked for a
// sandbox that does not exist, a call it serves and audits itself, and
// the events are read once all those marks are in the log (a node's
// Recorder appends its events in order, so what it recorded before its
// mark is there too).
func auditedSince(t *testing.T, ctx context.Context, ds []*daemon, since time.Time, verb, door, name string) []sandbox.AuditEvent {
	t.Helper()
	var marks []string
	for i, d := range ds {
		mark := fmt.Sprintf("mark-%d-%d", i, time.Now().UnixNano())
		if _, err := d.Client().Get(ctx, mark); !sandbox.IsCode(err, sandbox.CodeNotFound) {
			t.Fatalf("Get(%s) through %s = %v, want not_found", mark, d.URL, err)
		}
		marks = append(marks, mark)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		all, err := ds[0].Client().Admin().Audit(ctx, sandbox.AuditFilter{Since: since, Limit: 10000})
		if err != nil {
			t.Fatalf("Audit(since %s): %v", since, err)
		}
		var events []sandbox.AuditEvent
		seen := 0
		for _, e := range all {
			if e.Verb == "sandbox.get" && slices.Contains(marks, e.Sandbox) {
				seen++
			}
			if e.Verb == verb && e.Door == door && e.Sandbox == name {
				events = append(events, e)
			}
		}
		if seen == len(marks) {
			return events
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after each node audited a get of %v, the audit log holds %d of them:\n%+v", marks, seen, all)
		}
	}
}

// spritesOnExisting is the part of testdata/sprites/client.mjs that works
// on a sprite that exists already (it creates and deletes none), written
// with the same SDK, steps and failure lines; HEARTH_CASE (a spritesCase
// in JSON) says the sprite, the files and what to check. It prints one
// line per step and exits 0, or 1 after "FAIL <step>: <why>".
const spritesOnExisting = `
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { randomBytes } from 'node:crypto';
import { finished } from 'node:stream/promises';
import assert from 'node:assert/strict';

function fail(name, msg) {
  console.log('FAIL ' + name + ': ' + msg);
  process.exit(1);
}
const env = (k) => {
  const v = process.env[k];
  if (!v) fail('setup', k + ' is not set');
  return v;
};
const baseURL = env('HEARTH_SPRITES_URL');
const token = env('HEARTH_TOKEN');
const prefix = env('HEARTH_SPRITES_JS');
const c = JSON.parse(env('HEARTH_CASE'));

let sdk;
try {
  const require = createRequire(prefix + '/package.json');
  sdk = await import(pathToFileURL(require.resolve('@fly/sprites')).href);
} catch (err) {
  fail('setup', 'cannot import @fly/sprites from ' + prefix + ': ' + err.message);
}
const { SpritesClient, APIError, ExecError, FilesystemError } = sdk;

function describe(err) {
  if (!(err instanceof Error)) return String(err);
  const parts = [err.name];
  if (err instanceof APIError) parts.push('status ' + err.statusCode, err.errorCode && 'error ' + JSON.stringify(err.errorCode));
  if (err instanceof FilesystemError) parts.push('code ' + err.code, 'path ' + err.path);
  if (err instanceof ExecError) parts.push('exit ' + err.exitCode, 'stdout ' + JSON.stringify(err.stdout), 'stderr ' + JSON.stringify(err.stderr));
  let msg = parts.filter(Boolean).join(', ') + ': ' + err.message;
  if (err.cause) msg += ' (cause: ' + (err.cause.message ?? err.cause) + ')';
  return msg;
}

async function step(name, fn, timeoutMs = 120_000) {
  const start = Date.now();
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error('no answer within ' + timeoutMs / 1000 + 's')), timeoutMs);
  });
  try {
    const detail = await Promise.race([fn(), deadline]);
    console.log('ok   ' + name + (detail ? ' (' + detail + ')' : '') + ' [' + (Date.now() - start) + 'ms]');
  } catch (err) {
    fail(name, describe(err));
  } finally {
    clearTimeout(timer);
  }
}

async function rejects(p, what) {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error(what + ' succeeded; want an error');
}

function run(sprite, file, args, opts, input) {
  return new Promise((resolve, reject) => {
    const cmd = sprite.spawn(file, args, opts);
    const stdout = [];
    const stderr = [];
    cmd.stdout.on('data', (b) => stdout.push(b));
    cmd.stderr.on('data', (b) => stderr.push(b));
    cmd.on('error', reject);
    cmd.on('spawn', () => {
      if (input !== undefined) cmd.stdin.end(input);
    });
    const ended = (s) => finished(s, { writable: false });
    Promise.all([cmd.wait(), ended(cmd.stdout), ended(cmd.stderr)]).then(
      ([code]) => resolve({ code, stdout: Buffer.concat(stdout), stderr: Buffer.concat(stderr) }),
      reject,
    );
  });
}

async function drain(stream, what) {
  const events = [];
  for await (const ev of stream) {
    events.push(ev);
    if (ev.type === 'error') throw new Error(what + ': error event ' + JSON.stringify(ev));
  }
  assert.ok(events.length > 0 && events.at(-1).type === 'complete', what + ': events ' + JSON.stringify(events) + ', want a last one of type complete');
  return events.at(-1).data;
}

const client = new SpritesClient(token, { baseURL });
const statuses = ['cold', 'warm', 'running'];
let sprite;

await step('get sprite ' + c.sprite, async () => {
  sprite = await client.getSprite(c.sprite);
  assert.equal(sprite.name, c.sprite, 'getSprite: name');
  assert.ok(statuses.includes(sprite.status), 'getSprite: status ' + JSON.stringify(sprite.status) + ', want one of ' + statuses);
  return 'status ' + sprite.status + ', id ' + sprite.id;
});
await step('list sprites', async () => {
  const page = await client.listSprites({ prefix: c.sprite, maxResults: 50 });
  const names = page.sprites.map((s) => s.name);
  assert.deepEqual(names, [c.sprite], 'listSprites(prefix ' + c.sprite + ')');
  const all = (await client.listAllSprites()).map((s) => s.name);
  assert.ok(all.includes(c.sprite), 'listAllSprites() = ' + JSON.stringify(all) + ', want ' + c.sprite + ' in it');
  return all.join(' ');
});

await step('exec echo', async () => {
  const res = await sprite.execFile('echo', ['hello', 'sprite']);
  assert.equal(res.exitCode, 0, 'exit code');
  assert.equal(res.stdout, 'hello sprite\n', 'stdout');
  assert.equal(res.stderr, '', 'stderr');
});
await step('exec stdout, stderr and exit 3', async () => {
  const err = await rejects(sprite.execFile('sh', ['-c', 'echo to-out; echo to-err >&2; exit 3']), 'exit 3');
  assert.ok(err instanceof ExecError, 'want ExecError, got ' + describe(err));
  assert.equal(err.exitCode, 3, 'exit code');
  assert.equal(err.stdout, 'to-out\n', 'stdout');
  assert.equal(err.stderr, 'to-err\n', 'stderr');
});
await step('exec reads the file the other node wrote', async () => {
  const res = await sprite.execFile('cat', [c.from_a.path]);
  assert.equal(res.stdout, c.from_a.text, 'cat ' + c.from_a.path);
});
await step('exec writes a file with env', async () => {
  await sprite.execFile('sh', ['-c', 'printf "%s\\n" "$HEARTH_JS_VAR" > ' + c.exec_to_a.path], { env: { HEARTH_JS_VAR: c.exec_to_a.text } });
});
await step('exec stdin to cat', async () => {
  const input = Buffer.concat([Buffer.from('line one\nline two\n'), randomBytes(200 << 10)]);
  const res = await run(sprite, 'cat', [], {}, input);
  assert.equal(res.code, 0, 'exit code (stderr ' + JSON.stringify(String(res.stderr)) + ')');
  assert.equal(res.stdout.length, input.length, 'stdout length');
  assert.ok(res.stdout.equals(input), 'stdout differs from stdin');
  return input.length + ' bytes';
});
await step('exec tty', async () => {
  const res = await sprite.execFile('tty', [], { tty: true });
  assert.match(res.stdout.trim(), /^\/dev\/pts\/\d+$/, 'stdout');
  return res.stdout.trim();
});

const fs = sprite.filesystem('/');
await step('fs read the file the other node wrote', async () => {
  assert.equal(await fs.readFile(c.from_a.path, 'utf8'), c.from_a.text, 'readFile ' + c.from_a.path);
});
await step('fs write, read and list', async () => {
  await fs.writeFile(c.to_a.path, c.to_a.text);
  assert.equal(await fs.readFile(c.to_a.path, 'utf8'), c.to_a.text, 'read back');
  const dir = c.to_a.path.slice(0, c.to_a.path.lastIndexOf('/'));
  const ents = await fs.readdir(dir, { withFileTypes: true });
  assert.deepEqual(ents.map((e) => [e.name, e.isFile()]), [[c.to_a.path.slice(dir.length + 1), true]], 'readdir(' + dir + ')');
  const st = await fs.stat(c.to_a.path);
  assert.equal(st.size, Buffer.byteLength(c.to_a.text), 'stat size');
});

let checkpointID;
await step('checkpoint', async () => {
  await fs.writeFile(c.state, 'before\n');
  const done = await drain(await sprite.createCheckpoint(c.comment), 'createCheckpoint');
  const list = await sprite.listCheckpoints();
  const cp = list.find((x) => x.comment === c.comment);
  assert.ok(cp, 'listCheckpoints = ' + JSON.stringify(list) + ', want one with comment ' + JSON.stringify(c.comment));
  checkpointID = cp.id;
  assert.equal((await sprite.getCheckpoint(checkpointID)).id, checkpointID, 'getCheckpoint: id');
  return checkpointID + ': ' + done;
}, 300_000);
await step('change the file after the checkpoint', async () => {
  await fs.writeFile(c.state, 'after\n');
  assert.equal(await fs.readFile(c.state, 'utf8'), 'after\n', 'read back');
});
await step('restore the checkpoint', async () => {
  const done = await drain(await sprite.restoreCheckpoint(checkpointID), 'restoreCheckpoint');
  let content;
  for (let i = 0; ; i++) {
    try {
      content = await fs.readFile(c.state, 'utf8');
      break;
    } catch (err) {
      if (i >= 30) throw err;
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
  assert.equal(content, 'before\n', 'fs read after the restore');
  assert.equal((await sprite.execFile('cat', [c.state])).stdout, 'before\n', 'exec cat after the restore');
  return done;
}, 300_000);

await step('network policy', async () => {
  await sprite.updateNetworkPolicy({ rules: [{ domain: c.allow_dns, action: 'allow' }] });
  const got = await sprite.getNetworkPolicy();
  assert.deepEqual(got.rules, [{ domain: c.allow_dns, action: 'allow' }], 'getNetworkPolicy = ' + JSON.stringify(got));
});

console.log('PASS');
process.exit(0);
`
