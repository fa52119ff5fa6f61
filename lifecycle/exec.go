package lifecycle

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/hearth/hearth/policy"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/tracing"
)

// Processes runs commands in sandboxes and connects to the ports their
// processes listen on, through each sandbox's agent; a sleeping sandbox is
// woken first. It is safe for concurrent use.
type Processes struct {
	*core
	run         *runner
	adm         *admission
	checkpoints *Checkpoints
	creds       *Credentials
	// commands queues the starts of commands (see commandSlot); hold is
	// the longest a command holds its slot (execHold; tests change it).
	commands *heavy
	hold     time.Duration
}

// Exec runs one command in the sandbox ref names for p (see Sandboxes.Get), waking it
// if it sleeps.
// stdout and stderr receive the command's output as it is produced; stdin,
// when req.Stdin is set, is streamed to the command until it returns EOF.
// If ctx ends before the command does, the command keeps running for its
// grace period and is then killed; Exec returns ctx's error.
//
// A script that streams after the request (req.ShellSize, read from
// req.Script) goes to the sandbox as it comes, never held whole here; the
// destructive-command gate reads it on the way and decides before its last
// byte is passed on (see scriptGate).
func (s *Processes) Exec(ctx context.Context, p sandbox.Principal, name string, req sandbox.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (_ sandbox.ExecResult, err error) {
	ctx, span := tracer.Start(ctx, "lifecycle.exec")
	defer func() { tracing.End(span, err) }()
	if err := req.Validate(); err != nil {
		return sandbox.ExecResult{}, err
	}
	if req.ShellSize > 0 && req.Script == nil {
		return sandbox.ExecResult{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "exec: shell_size without the script's stream")
	}
	sb, ag, err := s.run.running(ctx, p, name)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	var checkpoint, note string
	var sg *scriptGate
	if req.ShellSize > 0 {
		sg = s.gateScript(ctx, p, sb, req.Script, req.ShellSize)
		defer sg.close()
		req.Script = sg
	} else if checkpoint, note, err = s.gate(ctx, p, sb, req); err != nil {
		return sandbox.ExecResult{}, err
	}
	req, secrets, stdout, stderr, done, err := s.creds.withSecrets(ctx, sb.Tenant, req, stdout, stderr)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	end := s.leases.begin(sb.ID, s.now)
	release, err := s.commandSlot(ctx, sb)
	if err != nil {
		end()
		done()
		return sandbox.ExecResult{}, err
	}
	actx, aspan := tracer.Start(ctx, "agent.exec")
	res, err := ag.ExecSecrets(actx, req, secrets, stdin, stdout, stderr)
	tracing.End(aspan, err)
	release()
	end()
	done()
	err = s.agentErr("exec", sb, err)
	if err == nil && res.OOMKilled {
		s.noteOOM(ctx, sb)
	}
	if sg != nil {
		checkpoint, note = sg.checkpoint, sg.note
	}
	res.Checkpoint, res.Gate = checkpoint, note
	return res, err
}

// execHold is the longest a command holds its slot of the command queue.
const execHold = 200 * time.Millisecond

// commandSlot waits in the command queue for a slot to run a command in sb
// (FIFO per tenant, round-robin across tenants, as heavy work waits; a
// context that ends first gets unavailable with the queue position). The
// slot is held while the command runs, but at most s.hold (execHold): a command's
// start, and a short command's whole run, is what loads the cores (under
// gVisor an exec of true costs some 15 ms of CPU), and one that runs
// longer gives its slot up and runs on. Unqueued, twenty loops of short
// commands on two cores got most calls through at once and starved a few
// sandboxes for a second or more at a time (p99 fifty times p50); taking
// turns, every call takes about as long as the others. release ends the
// hold early; it may be called more than once.
func (s *Processes) commandSlot(ctx context.Context, sb sandbox.Sandbox) (release func(), err error) {
	free, err := s.commands.acquire(ctx, job{tenant: sb.Tenant})
	if err != nil {
		return nil, err
	}
	t := time.AfterFunc(s.hold, free)
	return func() {
		t.Stop()
		free()
	}, nil
}

// gateLabel labels the automatic checkpoints of the gate. The command is
// not in it: a command line may carry a credential.
const gateLabel = sandbox.AutoLabel

// gate is the destructive-command gate (see policy.Limits.Destructive):
// when req matches one of the patterns of sb's tenant, it checkpoints sb
// first and returns the checkpoint and a note for the result. When the
// checkpoint fails, the tenant's policy refuses the command (an error) or
// lets it run (a note saying so).
func (s *Processes) gate(ctx context.Context, p sandbox.Principal, sb sandbox.Sandbox, req sandbox.ExecRequest) (checkpoint, note string, err error) {
	lim := s.adm.limitsOf(ctx, sb.Tenant)
	pattern, ok := lim.Destructive(policy.CommandText(req))
	return s.checkpointFirst(ctx, p, sb, lim, pattern, ok)
}

// checkpointFirst is the gate's answer once the command's text has matched
// pattern (ok) or nothing.
func (s *Processes) checkpointFirst(ctx context.Context, p sandbox.Principal, sb sandbox.Sandbox, lim policy.Limits, pattern policy.Pattern, ok bool) (checkpoint, note string, err error) {
	if !ok {
		return "", "", nil
	}
	ck, err := s.checkpoint(ctx, p, sb)
	if err == nil {
		s.log.Info("checkpoint before a destructive command", "sandbox", sb.Name, "checkpoint", ck.ID, "pattern", pattern.Name)
		return ck.ID, fmt.Sprintf("the command looks destructive (%s): checkpoint %s was taken first; restore it to undo the command", pattern.Name, ck.ID), nil
	}
	s.log.Warn("the checkpoint before a destructive command failed", "sandbox", sb.Name, "pattern", pattern.Name, "err", err)
	if lim.GateOnFailure == policy.GateAllow {
		return "", fmt.Sprintf("the command looks destructive (%s), but the checkpoint before it failed: it ran without one", pattern.Name), nil
	}
	return "", "", sandbox.Errorf(sandbox.CodeUnavailable, "refused: the command looks destructive (%s), and the checkpoint hearth takes before such a command failed", pattern.Name).
		WithHint("retry; or checkpoint the sandbox yourself, and ask a tenant admin to set the policy's gate_on_failure to allow")
}

// checkpoint takes the gate's checkpoint of sb, which p found (see
// runner.running), under its name's lock: the internal path of
// Checkpoints.Checkpoint, with no second look-up of the name.
func (s *Processes) checkpoint(ctx context.Context, p sandbox.Principal, sb sandbox.Sandbox) (sandbox.Checkpoint, error) {
	cur, unlock, err := s.current(ctx, sb)
	if err != nil {
		return sandbox.Checkpoint{}, err
	}
	defer unlock()
	return s.checkpoints.take(ctx, cur, p.RefOf(sb.Tenant, sb.Name), sandbox.CheckpointRequest{Label: gateLabel})
}

// gateScript returns the gate of the size-byte script that streams from r
// to sb's agent.
func (s *Processes) gateScript(ctx context.Context, p sandbox.Principal, sb sandbox.Sandbox, r io.Reader, size int64) *scriptGate {
	lim := s.adm.limitsOf(ctx, sb.Tenant)
	g := &scriptGate{r: io.LimitReader(r, size), left: size, match: lim.Matcher()}
	g.decide = func(pattern policy.Pattern, ok bool) (err error) {
		g.checkpoint, g.note, err = s.checkpointFirst(ctx, p, sb, lim, pattern, ok)
		return err
	}
	return g
}

// scriptGate is the destructive-command gate of a script that streams to
// the sandbox (ExecRequest.ShellSize): it passes the script on as it comes
// while the tenant's patterns read it (policy.Matcher), and decides (the
// checkpoint first, or the refusal) in the Read that brings the script's
// last bytes, before returning them. The agent starts the command only
// once it has the whole script, so the command cannot start before the
// decision; a refusal is that Read's error, which ends the exec.
type scriptGate struct {
	r      io.Reader
	left   int64
	match  *policy.Matcher
	decide func(policy.Pattern, bool) error
	// checkpoint and note are the gate's, once it has decided.
	checkpoint, note string
}

func (g *scriptGate) Read(p []byte) (int, error) {
	if g.left == 0 {
		return 0, io.EOF
	}
	n, err := g.r.Read(p)
	g.match.Write(p[:n])
	g.left -= int64(n)
	if g.left == 0 {
		if derr := g.decide(g.match.Close()); derr != nil {
			return 0, derr
		}
	}
	return n, err
}

// close ends the matching of a script that did not arrive whole.
func (g *scriptGate) close() { g.match.Close() }

// noteOOM records in the sandbox's status that its memory limit killed a
// command, so that the status, not only that exec's result, tells it.
func (s *Processes) noteOOM(ctx context.Context, sb sandbox.Sandbox) {
	cur, unlock, err := s.current(ctx, sb)
	if err != nil {
		return
	}
	defer unlock()
	s.setStatus(ctx, cur, cur.Status, fmt.Sprintf("oom: the memory limit (%d MiB) killed a command at %s", cur.Resources.MemoryBytes>>20, s.now().UTC().Format(time.RFC3339)))
}
