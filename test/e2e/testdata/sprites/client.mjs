// A real Sprites client, written with the official JavaScript SDK
// (@fly/sprites), driving hearth's Sprites-compatible API (/v1/sprites…)
// the way an existing Sprites user would: only the base URL and the token
// differ from the real service. Run by test/e2e/sprites_js_client_test.go with
// Node 22; by hand:
//
//   HEARTH_SPRITES_URL=http://127.0.0.1:7077 HEARTH_TOKEN=hearth_... \
//   HEARTH_SPRITES_JS=/var/cache/hearth/sprites-js \
//   node test/e2e/testdata/sprites/client.mjs
//
// or with the URL and the token as arguments:
//
//   HEARTH_SPRITES_JS=... node client.mjs http://127.0.0.1:7077 hearth_...
//
// HEARTH_SPRITES_JS is the npm prefix that holds @fly/sprites (what
// scripts/install.sh makes). The token may create two sprites. The
// script prints one line per step and exits 0 when every check passed, or
// 1 after printing the step that failed and why.
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { randomBytes } from 'node:crypto';
import { finished } from 'node:stream/promises';
import assert from 'node:assert/strict';

const env = (k) => {
  const v = process.env[k];
  if (!v) fail('setup', `${k} is not set`);
  return v;
};
const baseURL = process.argv[2] || env('HEARTH_SPRITES_URL');
const token = process.argv[3] || env('HEARTH_TOKEN');
const prefix = env('HEARTH_SPRITES_JS');

let sdk;
try {
  const require = createRequire(prefix + '/package.json');
  sdk = await import(pathToFileURL(require.resolve('@fly/sprites')).href);
} catch (err) {
  fail('setup', `cannot import @fly/sprites from ${prefix}: ${err.message}`);
}
const { SpritesClient, APIError, ExecError, FilesystemError } = sdk;

// fail prints the step that failed and why, and exits 1: the first
// mismatch ends the run, so that what follows does not bury it.
function fail(name, msg) {
  console.log(`FAIL ${name}: ${msg}`);
  process.exit(1);
}

// describe says what an error is, with what a server author needs to
// place it: the SDK's error class, the HTTP status, the fs error code.
function describe(err) {
  if (!(err instanceof Error)) return String(err);
  const parts = [err.name];
  if (err instanceof APIError) parts.push(`status ${err.statusCode}`, err.errorCode && `error ${JSON.stringify(err.errorCode)}`);
  if (err instanceof FilesystemError) parts.push(`code ${err.code}`, `path ${err.path}`);
  if (err instanceof ExecError) parts.push(`exit ${err.exitCode}`, `stdout ${JSON.stringify(err.stdout)}`, `stderr ${JSON.stringify(err.stderr)}`);
  let msg = `${parts.filter(Boolean).join(', ')}: ${err.message}`;
  if (err.cause) msg += ` (cause: ${err.cause.message ?? err.cause})`;
  return msg;
}

// step runs one check with a deadline (the SDK has none on WebSockets and
// streams), prints "ok <name>" with what fn returns, or fails the run.
async function step(name, fn, timeoutMs = 120_000) {
  const start = Date.now();
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs / 1000}s`)), timeoutMs);
  });
  try {
    const detail = await Promise.race([fn(), deadline]);
    console.log(`ok   ${name}${detail ? ` (${detail})` : ''} [${Date.now() - start}ms]`);
  } catch (err) {
    fail(name, describe(err));
  } finally {
    clearTimeout(timer);
  }
}

// rejects asserts that p fails and returns the error.
async function rejects(p, what) {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error(`${what} succeeded; want an error`);
}

// isNotFound says whether err is what the SDK reports for a missing sprite.
const isNotFound = (err) => err instanceof APIError && err.statusCode === 404;

// run spawns a command and collects its output, for what execFile cannot
// do: stdin. input, when given, is written once the socket is open, then
// stdin is ended (the SDK sends the EOF frame then).
function run(sprite, file, args, opts, input) {
  return new Promise((resolve, reject) => {
    const cmd = sprite.spawn(file, args, opts);
    const stdout = [];
    const stderr = [];
    cmd.stdout.on('data', (c) => stdout.push(c));
    cmd.stderr.on('data', (c) => stderr.push(c));
    cmd.on('error', reject);
    cmd.on('spawn', () => {
      if (input !== undefined) cmd.stdin.end(input);
    });
    // The SDK ends only the readable side of its stdout and stderr
    // PassThrough streams (push(null)), so wait for that side alone.
    const ended = (s) => finished(s, { writable: false });
    Promise.all([cmd.wait(), ended(cmd.stdout), ended(cmd.stderr)]).then(
      ([code]) => resolve({ code, stdout: Buffer.concat(stdout), stderr: Buffer.concat(stderr) }),
      reject,
    );
  });
}

const client = new SpritesClient(token, { baseURL });
const rand = randomBytes(4).toString('hex');
const name = `js-${rand}`;
const otherName = `other-${rand}`;
const dir = `/tmp/hearth-js-${rand}`;
const statuses = ['cold', 'warm', 'running'];
let sprite;
let other;

// Lifecycle.
await step(`create sprite ${name}`, async () => {
  sprite = await client.createSprite(name);
  assert.equal(sprite.name, name, 'createSprite: name');
  assert.ok(statuses.includes(sprite.status), `createSprite: status ${JSON.stringify(sprite.status)}, want one of ${statuses}`);
  return `status ${sprite.status}`;
}, 300_000);
await step(`get sprite ${name}`, async () => {
  const got = await client.getSprite(name);
  assert.equal(got.name, name, 'getSprite: name');
  assert.ok(statuses.includes(got.status), `getSprite: status ${JSON.stringify(got.status)}, want one of ${statuses}`);
  assert.ok(got.createdAt instanceof Date && !isNaN(got.createdAt), `getSprite: created_at ${got.createdAt}`);
  return `status ${got.status}, id ${got.id}`;
});
await step(`create sprite ${otherName}`, async () => {
  other = await client.createSprite(otherName);
  assert.equal(other.name, otherName, 'createSprite: name');
}, 300_000);
await step('list sprites with prefix js-', async () => {
  const page = await client.listSprites({ prefix: 'js-', maxResults: 50 });
  const names = page.sprites.map((s) => s.name);
  assert.ok(names.includes(name), `listSprites(prefix js-) = ${JSON.stringify(names)}, want ${name} in it`);
  assert.ok(names.every((n) => n.startsWith('js-')), `listSprites(prefix js-) = ${JSON.stringify(names)}, want only js-*`);
  assert.equal(page.hasMore, false, 'listSprites: has_more');
  const all = (await client.listAllSprites('js-')).map((s) => s.name);
  assert.deepEqual(all.sort(), names.sort(), 'listAllSprites(js-) against listSprites(js-)');
  return names.join(' ');
});
await step('list sprites with prefix other-', async () => {
  const names = (await client.listAllSprites('other-')).map((s) => s.name);
  assert.ok(names.includes(otherName) && !names.includes(name), `listAllSprites(prefix other-) = ${JSON.stringify(names)}, want ${otherName} and not ${name}`);
  assert.ok(names.every((n) => n.startsWith('other-')), `listAllSprites(prefix other-) = ${JSON.stringify(names)}, want only other-*`);
});
await step('a wrong token is refused', async () => {
  const err = await rejects(new SpritesClient('not-a-token', { baseURL }).getSprite(name), 'getSprite with a wrong token');
  assert.ok(err instanceof APIError && err.statusCode === 401, `getSprite with a wrong token: ${describe(err)}; want APIError, status 401`);
});

// Exec over the WebSocket, non-TTY: separate streams and the exit code.
await step('exec echo', async () => {
  const res = await sprite.execFile('echo', ['hello', 'sprite']);
  assert.equal(res.exitCode, 0, 'exit code');
  assert.equal(res.stdout, 'hello sprite\n', 'stdout');
  assert.equal(res.stderr, '', 'stderr');
});
await step('exec stdout, stderr and exit 3', async () => {
  const err = await rejects(sprite.execFile('sh', ['-c', 'echo to-out; echo to-err >&2; exit 3']), 'exit 3');
  assert.ok(err instanceof ExecError, `want ExecError, got ${describe(err)}`);
  assert.equal(err.exitCode, 3, 'exit code');
  assert.equal(err.stdout, 'to-out\n', 'stdout');
  assert.equal(err.stderr, 'to-err\n', 'stderr');
});
await step('exec env', async () => {
  const value = 'a b=c "d"';
  const res = await sprite.execFile('sh', ['-c', 'printf %s "$HEARTH_JS_VAR"'], { env: { HEARTH_JS_VAR: value } });
  assert.equal(res.stdout, value, 'stdout');
});
await step('exec dir', async () => {
  const res = await sprite.execFile('pwd', [], { cwd: '/tmp' });
  assert.equal(res.stdout, '/tmp\n', 'stdout');
});
await step('exec stdin to cat', async () => {
  const input = Buffer.concat([Buffer.from('line one\nline two\n'), randomBytes(200 << 10)]);
  const res = await run(sprite, 'cat', [], {}, input);
  assert.equal(res.code, 0, `exit code (stderr ${JSON.stringify(String(res.stderr))})`);
  assert.equal(res.stdout.length, input.length, 'stdout length');
  assert.ok(res.stdout.equals(input), 'stdout differs from stdin');
  return `${input.length} bytes`;
});
await step('exec without a tty', async () => {
  const err = await rejects(sprite.execFile('tty'), 'tty without a tty');
  assert.ok(err instanceof ExecError && err.exitCode === 1, `want ExecError with exit 1, got ${describe(err)}`);
  assert.equal(err.stdout, 'not a tty\n', 'stdout');
});
// The SDK cannot see WebSocket pings: it counts any message as a sign of
// life and gives up ("WebSocket keepalive timeout") after 45s without
// one, so the server must send something while a command is silent.
await step('exec silent for 50s', async () => {
  const res = await sprite.execFile('sh', ['-c', 'sleep 50; echo done']);
  assert.equal(res.stdout, 'done\n', 'stdout');
});

// Exec with a TTY: raw frames, exit code from the close code.
await step('exec tty', async () => {
  const res = await sprite.execFile('tty', [], { tty: true });
  assert.match(res.stdout.trim(), /^\/dev\/pts\/\d+$/, 'stdout');
  return res.stdout.trim();
});
await step('exec tty rows and cols', async () => {
  const res = await sprite.execFile('stty', ['size'], { tty: true, rows: 33, cols: 101 });
  assert.equal(res.stdout.trim(), '33 101', 'stty size');
});

// Filesystem.
const fs = sprite.filesystem('/');
const big = randomBytes(1 << 20);
await step('fs write and read 1 MiB', async () => {
  await fs.writeFile(`${dir}/random.bin`, big);
  const back = await fs.readFile(`${dir}/random.bin`);
  assert.ok(Buffer.isBuffer(back), 'readFile returned no Buffer');
  assert.equal(back.length, big.length, 'length read back');
  assert.ok(back.equals(big), 'bytes read back differ');
});
await step('fs write creates parents', async () => {
  await fs.writeFile(`${dir}/deep/a/b/c.txt`, 'nested\n');
  assert.equal(await fs.readFile(`${dir}/deep/a/b/c.txt`, 'utf8'), 'nested\n', 'read back');
  // A relative path resolves against the filesystem's working dir.
  assert.equal(await sprite.filesystem(`${dir}/deep`).readFile('a/b/c.txt', 'utf8'), 'nested\n', 'read back relative to workingDir');
});
await step('fs mkdir recursive', async () => {
  await fs.mkdir(`${dir}/made/x/y`, { recursive: true });
  const ents = await fs.readdir(`${dir}/made/x`, { withFileTypes: true });
  assert.deepEqual(ents.map((e) => [e.name, e.isDirectory()]), [['y', true]], 'readdir(made/x)');
  assert.deepEqual(await fs.readdir(`${dir}/made/x/y`), [], 'readdir(made/x/y): the .keep file was not removed');
});
await step('fs list with metadata', async () => {
  const ents = await fs.readdir(dir, { withFileTypes: true });
  const got = Object.fromEntries(ents.map((e) => [e.name, e.isDirectory() ? 'dir' : e.isFile() ? 'file' : 'other']));
  assert.deepEqual(got, { 'random.bin': 'file', deep: 'dir', made: 'dir' }, `readdir(${dir})`);
  // The SDK stats by listing a file's path and reading entries[0].
  const st = await fs.stat(`${dir}/random.bin`);
  assert.equal(st.size, big.length, 'stat size');
  assert.ok(st.isFile() && !st.isDirectory(), 'stat: not a file');
  assert.equal(st.mode & 0o777, 0o644, 'stat mode of a file written without one');
  assert.ok(!isNaN(st.mtime), `stat mtime ${st.mtime}`);
  const now = Date.now();
  assert.ok(Math.abs(st.mtime.getTime() - now) < 3_600_000, `stat mtime ${st.mtime.toISOString()} is not within an hour of now`);
  return `size ${st.size}, mode ${st.mode.toString(8)}, mtime ${st.mtime.toISOString()}`;
});
await step('fs delete', async () => {
  await fs.writeFile(`${dir}/doomed.txt`, 'x');
  await fs.rm(`${dir}/doomed.txt`);
  const err = await rejects(fs.readFile(`${dir}/doomed.txt`), 'readFile after rm');
  assert.ok(err instanceof FilesystemError && err.code === 'ENOENT', `readFile after rm: ${describe(err)}; want FilesystemError, code ENOENT`);
  assert.equal(await fs.exists(`${dir}/doomed.txt`), false, 'exists after rm');
  const again = await rejects(fs.rm(`${dir}/doomed.txt`), 'rm of a missing file');
  assert.ok(again instanceof FilesystemError && again.code === 'ENOENT', `rm of a missing file: ${describe(again)}; want code ENOENT`);
  await fs.rm(`${dir}/doomed.txt`, { force: true }); // 404 is ignored with force
});
await step('fs script keeps mode 0755 and runs', async () => {
  const script = `${dir}/run.sh`;
  await fs.writeFile(script, '#!/bin/sh\necho v1\n', { mode: 0o755 });
  assert.equal((await fs.stat(script)).mode & 0o777, 0o755, 'mode after a write with mode 0755');
  assert.equal((await sprite.execFile(script)).stdout, 'v1\n', 'first run');
  // A rewrite that sends no mode keeps the file's.
  await fs.writeFile(script, '#!/bin/sh\necho v2\n');
  assert.equal((await fs.stat(script)).mode & 0o777, 0o755, 'mode after a rewrite without a mode');
  assert.equal((await sprite.execFile(script)).stdout, 'v2\n', 'run after the rewrite');
});

// Checkpoints: change a file after one, restore it, the old content is back.
const state = `${dir}/state.txt`;
const comment = `js e2e ${rand}`;
let checkpointID;
// drain reads a checkpoint or restore stream to its end; an error event
// fails the step and a complete event must end it.
async function drain(stream, what) {
  const events = [];
  for await (const ev of stream) {
    events.push(ev);
    if (ev.type === 'error') throw new Error(`${what}: error event ${JSON.stringify(ev)}`);
  }
  assert.ok(events.length > 0 && events.at(-1).type === 'complete', `${what}: events ${JSON.stringify(events)}, want a last one of type complete`);
  return events.at(-1).data;
}
await step('checkpoint', async () => {
  await fs.writeFile(state, 'before\n');
  const done = await drain(await sprite.createCheckpoint(comment), 'createCheckpoint');
  const list = await sprite.listCheckpoints();
  const cp = list.find((c) => c.comment === comment);
  assert.ok(cp, `listCheckpoints = ${JSON.stringify(list)}, want one with comment ${JSON.stringify(comment)}`);
  assert.ok(typeof cp.id === 'string' && cp.id !== '', `checkpoint id ${JSON.stringify(cp.id)}`);
  assert.ok(!isNaN(cp.createTime), `checkpoint create_time ${cp.createTime}`);
  checkpointID = cp.id;
  const got = await sprite.getCheckpoint(checkpointID);
  assert.equal(got.id, checkpointID, 'getCheckpoint: id');
  return `${checkpointID}: ${done}`;
}, 300_000);
await step('change the file after the checkpoint', async () => {
  await fs.writeFile(state, 'after\n');
  assert.equal(await fs.readFile(state, 'utf8'), 'after\n', 'read back');
});
await step('restore the checkpoint', async () => {
  const done = await drain(await sprite.restoreCheckpoint(checkpointID), 'restoreCheckpoint');
  // The real service restores asynchronously and says the next call may
  // have to retry: errors are retried for a while, a wrong content is not.
  let content;
  for (let i = 0; ; i++) {
    try {
      content = await fs.readFile(state, 'utf8');
      break;
    } catch (err) {
      if (i >= 30) throw err;
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
  assert.equal(content, 'before\n', 'fs read after the restore');
  assert.equal((await sprite.execFile('cat', [state])).stdout, 'before\n', 'exec cat after the restore');
  return done;
}, 300_000);

// The network policy: set through the SDK (which wants 204), read back.
await step('network policy', async () => {
  await sprite.updateNetworkPolicy({ rules: [
    { domain: '*', action: 'deny' },
    { domain: 'API.example.com', action: 'allow' },
    { domain: '*.pkg.example.org', action: 'allow' },
  ] });
  const got = await sprite.getNetworkPolicy();
  assert.deepEqual(got.rules, [
    { domain: 'api.example.com', action: 'allow' },
    { domain: '*.pkg.example.org', action: 'allow' },
  ], `getNetworkPolicy = ${JSON.stringify(got)}`);
  const err = await rejects(sprite.updateNetworkPolicy({ rules: [{ domain: 'x.example.com', action: 'block' }] }), 'updateNetworkPolicy(bad action)');
  assert.match(String(err), /Invalid policy/, `a bad policy: ${describe(err)}`);
  await sprite.updateNetworkPolicy({ rules: [] });
  assert.deepEqual((await sprite.getNetworkPolicy()).rules, [], 'rules after clearing');
});

// Deletion.
await step(`delete sprite ${name}`, async () => {
  await sprite.delete();
  const err = await rejects(client.getSprite(name), 'getSprite after delete');
  assert.ok(isNotFound(err), `getSprite after delete: ${describe(err)}; want APIError, status 404`);
  const names = (await client.listAllSprites('js-')).map((s) => s.name);
  assert.ok(!names.includes(name), `listAllSprites(js-) after delete = ${JSON.stringify(names)}`);
});
await step(`delete sprite ${otherName}`, async () => {
  await client.deleteSprite(otherName);
  const err = await rejects(client.getSprite(otherName), 'getSprite after delete');
  assert.ok(isNotFound(err), `getSprite after delete: ${describe(err)}; want APIError, status 404`);
});

console.log('PASS');
process.exit(0);
