// A real MCP client, written with the official TypeScript SDK
// (@modelcontextprotocol/sdk), driving hearth's six tools over Streamable
// HTTP with a bearer token. Run by test/e2e/mcp_client_test.go with Node
// 22; by hand:
//
//   HEARTH_MCP_URL=http://127.0.0.1:7077/mcp HEARTH_TOKEN=hearth_... \
//   HEARTH_MCP_JS=/var/cache/hearth/mcp-js HEARTH_QUOTA_TEXT='error: ...' \
//   node test/e2e/testdata/mcp-client.mjs
//
// The token must be an agent's whose quota is one sandbox, with none in
// use; HEARTH_QUOTA_TEXT is what the CLI prints when that agent creates a
// second. Exits 0 when every check passed, 1 after printing the first that
// failed.
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};
const require = createRequire(env('HEARTH_MCP_JS') + '/package.json');
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');

const client = new Client({ name: 'hearth-e2e-js', version: '1.0.0' });
const transport = new StreamableHTTPClientTransport(new URL(env('HEARTH_MCP_URL')), {
  requestInit: { headers: { Authorization: `Bearer ${env('HEARTH_TOKEN')}` } },
});
await client.connect(transport);

const text = (res) => res.content.filter((c) => c.type === 'text').map((c) => c.text).join('');

// call calls a tool, reporting its progress to onprogress, and returns the
// result; ok asserts it did not fail and returns its structured content.
async function call(name, args, onprogress) {
  return client.callTool({ name, arguments: args }, undefined, {
    timeout: 300_000,
    resetTimeoutOnProgress: true,
    onprogress,
  });
}
async function ok(name, args, onprogress) {
  const res = await call(name, args, onprogress);
  assert.ok(!res.isError, `${name}(${JSON.stringify(args)}) failed: ${text(res)}`);
  assert.ok(res.structuredContent, `${name}: no structured content`);
  return res.structuredContent;
}

const tools = await client.listTools();
assert.deepEqual(tools.tools.map((t) => t.name).sort(),
  ['image_list', 'image_pull', 'sandbox_checkpoint', 'sandbox_create', 'sandbox_destroy', 'sandbox_exec', 'sandbox_list', 'sandbox_restore']);

const sb = await ok('sandbox_create', { name: 'box', ttl: '1h' });
assert.equal(sb.name, 'agent-bot-box');
assert.equal(sb.status, 'running');

// exec with progress: the output arrives as progress before the result.
const progress = [];
const ex = await ok('sandbox_exec', { sandbox: 'box', command: 'echo one > f; cat f; sleep 0.5; echo two' },
  (p) => progress.push(p));
assert.equal(ex.exit_code, 0);
assert.equal(ex.stdout, 'one\ntwo\n');
assert.ok(progress.some((p) => (p.message ?? '').includes('one\n')),
  `no progress notification carried the output: ${JSON.stringify(progress)}`);

const ck = await ok('sandbox_checkpoint', { sandbox: 'box', label: 'first' });
assert.match(ck.id, /^c/);
await ok('sandbox_exec', { sandbox: 'box', command: 'echo changed > f' });
assert.equal((await ok('sandbox_exec', { sandbox: 'box', command: 'cat f' })).stdout, 'changed\n');
await ok('sandbox_restore', { sandbox: 'box', checkpoint: ck.id });
assert.equal((await ok('sandbox_exec', { sandbox: 'box', command: 'cat f' })).stdout, 'one\n',
  'the file is not back as the checkpoint had it');

let ls = await ok('sandbox_list', {});
assert.deepEqual(ls.sandboxes.map((s) => s.name), ['agent-bot-box']);
assert.equal(ls.usage.summary, '1 of 1 sandboxes');

// The quota: a tool error (not a protocol error) in the CLI's words, with
// {"error": the API's error object} as its structured content, which the
// tool's output schema admits, so the SDK's callTool (which checks an
// error result's structured content against the output schema too)
// returns it instead of throwing.
const q = await client.callTool({ name: 'sandbox_create', arguments: { name: 'box2' } }, undefined, { timeout: 300_000 });
assert.equal(q.isError, true, `sandbox_create over the quota succeeded: ${JSON.stringify(q)}`);
assert.equal(text(q), env('HEARTH_QUOTA_TEXT'));
assert.equal(q.structuredContent?.error?.code, 'quota_exceeded');
assert.equal(q.structuredContent?.error?.details?.limit, 1);
assert.equal(q.structuredContent?.error?.details?.used, 1);

await ok('sandbox_destroy', { sandbox: 'box' });
ls = await ok('sandbox_list', {});
assert.equal(ls.sandboxes.length, 0);
assert.equal(ls.usage.summary, '0 of 1 sandboxes');

await client.close();
console.log('mcp-client: all checks passed');
