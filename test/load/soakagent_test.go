package load_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
)

// retryBound is how long the soak retries a call that keeps failing with
// a code that may pass (the daemon being killed, restarted, recovering):
// past it, the call is a failure.
const retryBound = 2 * time.Minute

// soakFiles are the paths (under the sandbox user's home) the soak writes.
var soakFiles = []string{"load/f0.bin", "load/f1.bin", "load/f2.bin", "load/f3.bin"}

// soakBox is what an agent knows one of its sandboxes holds: every call
// the daemon acknowledged, which must hold across kills.
type soakBox struct {
	name  string            // as the agent writes it
	files map[string]string // path → SHA-256 of the content last written
	cks   []soakCheckpoint  // acknowledged, oldest first
	// tainted: a call on the box failed, so its content is unknown; the
	// next step destroys and re-creates it, and no check reads it until then.
	tainted bool
}

// soakCheckpoint is an acknowledged checkpoint and the files it holds.
type soakCheckpoint struct {
	id    string
	files map[string]string
}

// soakAgent is one agent identity of the soak and its sandboxes; one
// goroutine steps it, and the soak's controller reads it while the
// steps are paused.
type soakAgent struct {
	name, tenant, token string
	tg                  *target
	boxes               []*soakBox
	rng                 *rand.Rand
	recs                *recorders
	// fail reports a failure of the soak (an uncoded error, lost data).
	fail func(format string, args ...any)
}

// recorders holds one recorder per kind of call, shared by the agents.
type recorders struct {
	mu sync.Mutex
	m  map[string]*recorder
}

func (r *recorders) get(op string) *recorder {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m[op] == nil {
		r.m[op] = newRecorder(op)
	}
	return r.m[op]
}

// final reports whether code is an answer the soak's steps handle
// themselves rather than retry.
func final(code string) bool {
	switch sandbox.Code(code) {
	case sandbox.CodeNotFound, sandbox.CodeAlreadyExists, sandbox.CodeInvalidArgument, sandbox.CodeTooLarge,
		sandbox.CodeUnauthenticated, sandbox.CodePermissionDenied:
		return true
	}
	return code == "uncoded" || code == "no_answer"
}

// call runs f, with the agent's client of the daemon's current run, until
// it succeeds or fails with a final code; other coded errors (unavailable
// while the daemon is down, …) are retried for up to retryBound.
func (a *soakAgent) call(op string, f func(ctx context.Context, c *client.Client) error) error {
	rec := a.recs.get(op)
	var since time.Time
	for {
		start := time.Now()
		err := bounded(context.Background(), func(ctx context.Context) error { return f(ctx, a.tg.client(a.token)) })
		rec.add(time.Since(start), err)
		code := codeOf(err)
		if err == nil || final(code) {
			return err
		}
		if since.IsZero() {
			since = start
		}
		if time.Since(since) > retryBound {
			return fmt.Errorf("%s kept failing for %s, the last time with %s: %w", op, retryBound, code, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// step does one call, or a few that belong together, on a random box.
func (a *soakAgent) step() {
	b := a.boxes[a.rng.IntN(len(a.boxes))]
	var err error
	switch n := a.rng.IntN(100); {
	case b.tainted || n >= 94:
		err = a.recreate(b)
	case n < 30:
		err = a.exec(b.name)
	case n < 55:
		err = a.writeRead(b)
	case n < 67:
		err = a.checkpoint(b)
	case n < 77:
		err = a.restore(b)
	case n < 85:
		err = a.fork(b)
	default:
		err = a.sleepWake(b)
	}
	if err != nil {
		b.tainted = true
		a.fail("agent %s, sandbox %s: %v", a.name, b.name, err)
	}
}

// exec runs `echo NONCE` with its output in the result, and checks it.
func (a *soakAgent) exec(name string) error {
	nonce := fmt.Sprintf("%016x", a.rng.Uint64())
	var res sandbox.ExecResult
	err := a.call("exec with output", func(ctx context.Context, c *client.Client) (err error) {
		res, err = c.Exec(ctx, name, sandbox.ExecRequest{Argv: []string{"echo", nonce}, MaxOutputBytes: 4096}, nil, nil, nil)
		return err
	})
	switch {
	case err != nil:
		return fmt.Errorf("exec: %w", err)
	case res.ExitCode != 0 || res.Output == nil || res.Output.Stdout != nonce+"\n":
		return fmt.Errorf("exec `echo %s` = %+v, output %+v", nonce, res, res.Output)
	}
	return nil
}

// writeRead writes a random file and reads it back.
func (a *soakAgent) writeRead(b *soakBox) error {
	path := soakFiles[a.rng.IntN(len(soakFiles))]
	data := make([]byte, 1+a.rng.IntN(64<<10))
	for i := range data {
		data[i] = byte(a.rng.Uint32())
	}
	err := a.call("write file", func(ctx context.Context, c *client.Client) error {
		_, err := c.WriteFile(ctx, b.name, sandbox.WriteRequest{Path: path, Parents: true}, bytes.NewReader(data))
		return err
	})
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	b.files[path] = hash(data)
	return a.wantFile(b.name, path, b.files[path])
}

// wantFile reads path in sandbox name and wants content of SHA-256 sum,
// or not_found when sum is "".
func (a *soakAgent) wantFile(name, path, sum string) error {
	var buf bytes.Buffer
	op := "read file"
	if sum == "" {
		op = "read file that must be absent" // not_found is the answer
	}
	err := a.call(op, func(ctx context.Context, c *client.Client) error {
		buf.Reset()
		return c.ReadFile(ctx, name, path, &buf)
	})
	switch {
	case sum == "" && sandbox.IsCode(err, sandbox.CodeNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("read %s (want %s): %w", path, short(sum), err)
	case hash(buf.Bytes()) != sum:
		return fmt.Errorf("LOST DATA: %s of sandbox %s holds %d bytes of SHA-256 %s, want %s", path, name, buf.Len(), short(hash(buf.Bytes())), short(sum))
	}
	return nil
}

// wantFiles checks every path of soakFiles in sandbox name against files.
func (a *soakAgent) wantFiles(name string, files map[string]string) error {
	for _, path := range soakFiles {
		if err := a.wantFile(name, path, files[path]); err != nil {
			return err
		}
	}
	return nil
}

// checkpoint takes a checkpoint (with memory one time in four) and keeps
// the newest three, deleting the oldest.
func (a *soakAgent) checkpoint(b *soakBox) error {
	var ck sandbox.Checkpoint
	memory := a.rng.IntN(4) == 0
	err := a.call("checkpoint", func(ctx context.Context, c *client.Client) (err error) {
		ck, err = c.Checkpoint(ctx, b.name, sandbox.CheckpointRequest{Label: "soak", Memory: memory})
		return err
	})
	if err != nil {
		return fmt.Errorf("checkpoint (memory %v): %w", memory, err)
	}
	b.cks = append(b.cks, soakCheckpoint{id: ck.ID, files: maps.Clone(b.files)})
	if len(b.cks) <= 3 {
		return nil
	}
	old := b.cks[0]
	err = a.call("delete checkpoint", func(ctx context.Context, c *client.Client) error { return c.DeleteCheckpoint(ctx, b.name, old.id) })
	if err != nil && !sandbox.IsCode(err, sandbox.CodeNotFound) { // not_found: an attempt the daemon died answering did it
		return fmt.Errorf("delete checkpoint %s: %w", old.id, err)
	}
	b.cks = b.cks[1:]
	return nil
}

// restore restores a random checkpoint and checks the files it holds.
func (a *soakAgent) restore(b *soakBox) error {
	if len(b.cks) == 0 {
		return a.checkpoint(b)
	}
	ck := b.cks[a.rng.IntN(len(b.cks))]
	err := a.call("restore", func(ctx context.Context, c *client.Client) error {
		_, err := c.Restore(ctx, b.name, ck.id)
		return err
	})
	if err != nil {
		return fmt.Errorf("restore %s: %w", ck.id, err)
	}
	b.files = maps.Clone(ck.files)
	return a.wantFiles(b.name, b.files)
}

// fork forks a random checkpoint into a new sandbox, checks its files,
// and destroys it.
func (a *soakAgent) fork(b *soakBox) error {
	if len(b.cks) == 0 {
		return a.checkpoint(b)
	}
	ck := b.cks[a.rng.IntN(len(b.cks))]
	fork := b.name + "-f"
	for attempt := 0; ; attempt++ {
		err := a.call("fork", func(ctx context.Context, c *client.Client) error {
			_, err := c.Fork(ctx, b.name, ck.id, fork)
			return err
		})
		if err == nil {
			break
		}
		// already_exists: a fork an attempt the daemon died answering
		// made, or one a failed step left; it goes, and the fork again.
		if !sandbox.IsCode(err, sandbox.CodeAlreadyExists) || attempt > 0 {
			return fmt.Errorf("fork %s: %w", ck.id, err)
		}
		if err := a.destroy(fork); err != nil {
			return err
		}
	}
	if err := a.wantFiles(fork, ck.files); err != nil {
		return fmt.Errorf("fork of %s: %w", ck.id, err)
	}
	return a.destroy(fork)
}

// sleepWake puts the sandbox to sleep, wakes it and runs a command.
func (a *soakAgent) sleepWake(b *soakBox) error {
	for _, op := range []struct {
		name string
		f    func(context.Context, *client.Client) (sandbox.Sandbox, error)
	}{
		{"sleep", func(ctx context.Context, c *client.Client) (sandbox.Sandbox, error) { return c.Sleep(ctx, b.name) }},
		{"wake", func(ctx context.Context, c *client.Client) (sandbox.Sandbox, error) { return c.Wake(ctx, b.name) }},
	} {
		err := a.call(op.name, func(ctx context.Context, c *client.Client) error {
			_, err := op.f(ctx, c)
			return err
		})
		if err != nil {
			return fmt.Errorf("%s: %w", op.name, err)
		}
	}
	return a.exec(b.name)
}

// destroy destroys sandbox name; not_found is done (an attempt the
// daemon died answering may have done it).
func (a *soakAgent) destroy(name string) error {
	err := a.call("destroy", func(ctx context.Context, c *client.Client) error { return c.Destroy(ctx, name) })
	if err != nil && !sandbox.IsCode(err, sandbox.CodeNotFound) {
		return fmt.Errorf("destroy %s: %w", name, err)
	}
	return nil
}

// recreate destroys the sandbox and creates it again, empty and without
// checkpoints.
func (a *soakAgent) recreate(b *soakBox) error {
	if err := a.destroy(b.name); err != nil {
		return err
	}
	if err := a.create(b); err != nil {
		return err
	}
	var cks []sandbox.Checkpoint
	err := a.call("list checkpoints", func(ctx context.Context, c *client.Client) (err error) {
		cks, err = c.ListCheckpoints(ctx, b.name)
		return err
	})
	if err != nil || len(cks) != 0 {
		return fmt.Errorf("checkpoints of the re-created sandbox = %d, %v; want none", len(cks), err)
	}
	return nil
}

// create creates the box's sandbox (create is idempotent by name) and
// forgets what it held.
func (a *soakAgent) create(b *soakBox) error {
	err := a.call("create", func(ctx context.Context, c *client.Client) error {
		_, _, err := c.Create(ctx, sandbox.CreateRequest{Name: b.name})
		return err
	})
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	b.files, b.cks, b.tainted = map[string]string{}, nil, false
	return nil
}

// record counts what the agent's untainted boxes hold.
func (a *soakAgent) record() (boxes, files, checkpoints int) {
	for _, b := range a.boxes {
		if !b.tainted {
			boxes, files, checkpoints = boxes+1, files+len(b.files), checkpoints+len(b.cks)
		}
	}
	return
}

// verify checks that each untainted box exists, lists every acknowledged
// checkpoint and holds its files.
func (a *soakAgent) verify() {
	for _, b := range a.boxes {
		if b.tainted {
			continue
		}
		if err := a.verifyBox(b); err != nil {
			b.tainted = true
			a.fail("agent %s after a restart: sandbox %s: %v", a.name, b.name, err)
		}
	}
}

func (a *soakAgent) verifyBox(b *soakBox) error {
	var cks []sandbox.Checkpoint
	err := a.call("list checkpoints", func(ctx context.Context, c *client.Client) (err error) {
		cks, err = c.ListCheckpoints(ctx, b.name)
		return err
	})
	if err != nil {
		if sandbox.IsCode(err, sandbox.CodeNotFound) {
			return fmt.Errorf("LOST SANDBOX: %w", err)
		}
		return fmt.Errorf("list checkpoints: %w", err)
	}
	for _, ck := range b.cks {
		if !slices.ContainsFunc(cks, func(c sandbox.Checkpoint) bool { return c.ID == ck.id }) {
			return fmt.Errorf("LOST CHECKPOINT %s: the sandbox lists %d checkpoints without it", ck.id, len(cks))
		}
	}
	return a.wantFiles(b.name, b.files)
}

func hash(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// short is a hash's first 12 digits, or "absent" for "".
func short(sum string) string {
	if sum == "" {
		return "absent"
	}
	return sum[:12]
}
