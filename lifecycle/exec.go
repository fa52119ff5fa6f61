package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/hearth/hearth/policy"
	"github.com/hearth/hearth/sandbox"
)

// Exec runs one command in p's sandbox called name, waking it if it sleeps.
// stdout and stderr receive the command's output as it is produced; stdin,
// when req.Stdin is set, is streamed to the command until it returns EOF.
// If ctx ends before the command does, the command keeps running for its
// grace period and is then killed; Exec returns ctx's error.
func (s *Service) Exec(ctx context.Context, p sandbox.Principal, name string, req sandbox.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (sandbox.ExecResult, error) {
	name = p.Resolve(name)
	if err := req.Validate(); err != nil {
		return sandbox.ExecResult{}, err
	}
	sb, ag, err := s.running(ctx, p, name)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	checkpoint, note, err := s.gate(ctx, p, sb, req)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	req, secrets, stdout, stderr, done, err := s.withSecrets(ctx, sb.Tenant, req, stdout, stderr)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	end := s.leases.begin(sb.ID, s.now)
	res, err := ag.ExecSecrets(ctx, req, secrets, stdin, stdout, stderr)
	end()
	done()
	err = s.agentErr("exec", sb, err)
	if err == nil && res.OOMKilled {
		s.noteOOM(ctx, sb)
	}
	res.Checkpoint, res.Gate = checkpoint, note
	return res, err
}

// gateLabel labels the automatic checkpoints of the gate. The command is
// not in it: a command line may carry a credential.
const gateLabel = sandbox.AutoLabel

// gate is the destructive-command gate (see policy.Limits.Destructive):
// when req matches one of the patterns of sb's tenant, it checkpoints sb
// first and returns the checkpoint and a note for the result. When the
// checkpoint fails, the tenant's policy refuses the command (an error) or
// lets it run (a note saying so).
func (s *Service) gate(ctx context.Context, p sandbox.Principal, sb sandbox.Sandbox, req sandbox.ExecRequest) (checkpoint, note string, err error) {
	lim := s.limitsOf(ctx, sb.Tenant)
	pattern, ok := lim.Destructive(policy.CommandText(req))
	if !ok {
		return "", "", nil
	}
	ck, err := s.Checkpoint(ctx, p, sb.Name, sandbox.CheckpointRequest{Label: gateLabel})
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

// limitsOf returns the guardrails of tenant, or the daemon's defaults for
// a tenant with no row (the operators' "system").
func (s *Service) limitsOf(ctx context.Context, tenant string) policy.Limits {
	if _, lim, err := s.tenantLimits(ctx, tenant); err == nil {
		return lim
	}
	return s.defaultLimits()
}

// noteOOM records in the sandbox's status that its memory limit killed a
// command, so that the status, not only that exec's result, tells it.
func (s *Service) noteOOM(ctx context.Context, sb sandbox.Sandbox) {
	unlock := s.locks.lock(sb.Name)
	defer unlock()
	cur, err := s.opts.Store.GetSandbox(ctx, sb.Name)
	if err != nil || cur.ID != sb.ID {
		return
	}
	s.setStatus(ctx, cur, cur.Status, fmt.Sprintf("oom: the memory limit (%d MiB) killed a command at %s", cur.Resources.MemoryBytes>>20, s.now().UTC().Format(time.RFC3339)))
}

// ReadFile streams the file at path in p's sandbox to w. Errors (not_found,
// invalid_argument for a directory, …) come before any byte is written.
func (s *Service) ReadFile(ctx context.Context, p sandbox.Principal, name, path string, w io.Writer) error {
	name = p.Resolve(name)
	sb, ag, err := s.running(ctx, p, name)
	if err != nil {
		return err
	}
	return s.agentErr("read file", sb, ag.ReadFile(ctx, path, w))
}

// WriteFile writes r to req.Path in p's sandbox, as the sandbox user. Content
// over the daemon's limit is too_large and nothing is kept; an existing
// file keeps its mode, and its owner where the user may set it.
func (s *Service) WriteFile(ctx context.Context, p sandbox.Principal, name string, req sandbox.WriteRequest, r io.Reader) (sandbox.FileInfo, error) {
	name = p.Resolve(name)
	if req.MaxBytes <= 0 || req.MaxBytes > s.opts.MaxWriteBytes {
		req.MaxBytes = s.opts.MaxWriteBytes
	}
	sb, ag, err := s.running(ctx, p, name)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	info, err := ag.WriteFile(ctx, req, r)
	return info, s.agentErr("write file", sb, err)
}

// ListDir lists the directory at path in p's sandbox.
func (s *Service) ListDir(ctx context.Context, p sandbox.Principal, name, path string) ([]sandbox.FileInfo, error) {
	name = p.Resolve(name)
	sb, ag, err := s.running(ctx, p, name)
	if err != nil {
		return nil, err
	}
	list, err := ag.List(ctx, path)
	return list, s.agentErr("list", sb, err)
}

// Stat describes the file at path in p's sandbox (not following a symlink).
func (s *Service) Stat(ctx context.Context, p sandbox.Principal, name, path string) (sandbox.FileInfo, error) {
	name = p.Resolve(name)
	sb, ag, err := s.running(ctx, p, name)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	info, err := ag.Stat(ctx, path)
	return info, s.agentErr("stat", sb, err)
}

// Mkdir creates the directory at path and its missing parents (mkdir -p).
func (s *Service) Mkdir(ctx context.Context, p sandbox.Principal, name, path string) (sandbox.FileInfo, error) {
	name = p.Resolve(name)
	sb, ag, err := s.running(ctx, p, name)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	info, err := ag.Mkdir(ctx, path)
	return info, s.agentErr("mkdir", sb, err)
}

// Remove deletes the file at path; a directory needs recursive unless empty.
func (s *Service) Remove(ctx context.Context, p sandbox.Principal, name, path string, recursive bool) error {
	name = p.Resolve(name)
	sb, ag, err := s.running(ctx, p, name)
	if err != nil {
		return err
	}
	return s.agentErr("remove", sb, ag.Remove(ctx, path, recursive))
}

// Rename moves from to to inside p's sandbox.
func (s *Service) Rename(ctx context.Context, p sandbox.Principal, name, from, to string) (sandbox.FileInfo, error) {
	name = p.Resolve(name)
	sb, ag, err := s.running(ctx, p, name)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	info, err := ag.Rename(ctx, from, to)
	return info, s.agentErr("rename", sb, err)
}

// Chmod sets the permission bits of the file at path.
func (s *Service) Chmod(ctx context.Context, p sandbox.Principal, name, path string, mode fs.FileMode) (sandbox.FileInfo, error) {
	name = p.Resolve(name)
	sb, ag, err := s.running(ctx, p, name)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	info, err := ag.Chmod(ctx, path, mode)
	return info, s.agentErr("chmod", sb, err)
}

// agentErr returns err, an answer of sb's agent to op, and logs it when it
// is internal: the cause the agent sent with it is for this log only (see
// agent.Client), the caller sees "internal error".
func (s *Service) agentErr(op string, sb sandbox.Sandbox, err error) error {
	if err != nil && sandbox.ErrorCode(err) == sandbox.CodeInternal && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		s.log.Error("internal error in a sandbox's agent", "sandbox", sb.Name, "op", op, "err", err)
	}
	return err
}
