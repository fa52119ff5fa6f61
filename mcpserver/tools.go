package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hearth/hearth/sandbox"
)

// tools are the tool handlers of one caller.
type tools struct {
	s *Server
	p sandbox.Principal
}

// Inputs and outputs of the tools. The jsonschema tags are the schemas'
// descriptions: every byte of them is in tools/list, in every conversation
// of every client, so they stay short.

type createIn struct {
	Name    string `json:"name,omitempty" jsonschema:"same name, same sandbox"`
	Image   string `json:"image,omitempty" jsonschema:"see image_list"`
	Size    string `json:"size,omitempty" jsonschema:"small, medium or large"`
	TTL     any    `json:"ttl,omitempty" jsonschema:"seconds or e.g. 2h"`
	Network string `json:"network,omitempty" jsonschema:"none or egress"`
}

type createOut struct {
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	Status       string    `json:"status"`
	Created      bool      `json:"created"`
	ExpiresAt    time.Time `json:"expires_at,omitzero"`
	Capabilities []string  `json:"capabilities"`
}

type execIn struct {
	Sandbox string            `json:"sandbox"`
	Command string            `json:"command" jsonschema:"run by /bin/sh -c"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	Timeout any               `json:"timeout,omitempty" jsonschema:"seconds or e.g. 5m"`
	Secrets []string          `json:"secrets,omitempty" jsonschema:"secret names, set as env"`
}

// execOut is how a command ended and what it printed. A stream longer than
// the cap is cut (Truncated): the result keeps its head and tail around a
// marker line, *Bytes count the whole stream, and *File names where in the
// sandbox the whole stream was saved (empty when saving failed, which the
// marker says).
type execOut struct {
	ExitCode   int    `json:"exit_code"`
	TimedOut   bool   `json:"timed_out"`
	Signal     string `json:"signal,omitempty"`
	OOMKilled  bool   `json:"oom_killed,omitempty"`
	DurationMs int64  `json:"duration_ms"`
	sandbox.ExecOutput
	Checkpoint string `json:"checkpoint,omitempty" jsonschema:"restore it to undo"`
	Gate       string `json:"gate,omitempty"`
}

type checkpointIn struct {
	Sandbox string `json:"sandbox"`
	Label   string `json:"label,omitempty"`
	Memory  bool   `json:"memory,omitempty" jsonschema:"save the processes' memory too (gVisor only): a restore resumes them where they were"`
	Sleep   bool   `json:"sleep,omitempty" jsonschema:"leave the sandbox asleep at the checkpoint; with memory its processes stop where the checkpoint holds them"`
}

type checkpointOut struct {
	ID        string    `json:"id"`
	Label     string    `json:"label,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	SizeBytes int64     `json:"size_bytes"`
	Memory    bool      `json:"memory,omitempty"`
}

type restoreIn struct {
	Sandbox    string `json:"sandbox"`
	Checkpoint string `json:"checkpoint"`
}

type restoreOut struct {
	Name   string `json:"name"`
	Status string `json:"status"`
}

type destroyIn struct {
	Sandbox string `json:"sandbox"`
}

type destroyOut struct {
	Destroyed string `json:"destroyed"`
}

type listIn struct {
	Filter string `json:"filter,omitempty" jsonschema:"name prefix"`
}

type listOut struct {
	Sandboxes []listItem `json:"sandboxes"`
	Usage     usage      `json:"usage"`
}

type listItem struct {
	Name      string    `json:"name"`
	Status    string    `json:"status"`
	Size      string    `json:"size"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// usage is the caller's use of its sandbox quota: "3 of 5". Operators are
// under no quota: Limit is 0 and Summary says so.
type usage struct {
	Summary string `json:"summary"`
	Used    int    `json:"used"`
	Limit   int    `json:"limit,omitempty"`
}

// request is the create request in asks for, its ttl a duration (see
// duration).
func (in createIn) request() (sandbox.CreateRequest, error) {
	ttl, err := duration("ttl", in.TTL)
	return sandbox.CreateRequest{Name: in.Name, Image: in.Image, Size: in.Size, TTL: ttl, Network: in.Network}, err
}

func (t tools) create(ctx context.Context, _ *mcp.CallToolRequest, in createIn) (*mcp.CallToolResult, createOut, error) {
	req, err := in.request()
	if err != nil {
		return nil, createOut{}, err
	}
	sb, created, err := t.s.svc.Sandboxes.Create(ctx, t.p, req)
	if err != nil {
		return nil, createOut{}, t.s.publicError(ctx, "sandbox_create", err)
	}
	return nil, createOut{ID: sb.ID, Name: sb.Name, Status: string(sb.Status), Created: created, ExpiresAt: sb.ExpiresAt, Capabilities: sb.Capabilities}, nil
}

func (t tools) checkpoint(ctx context.Context, _ *mcp.CallToolRequest, in checkpointIn) (*mcp.CallToolResult, checkpointOut, error) {
	ck, err := t.s.svc.Checkpoints.Checkpoint(ctx, t.p, in.Sandbox, sandbox.CheckpointRequest{Label: in.Label, Memory: in.Memory, Sleep: in.Sleep})
	if err != nil {
		return nil, checkpointOut{}, t.s.publicError(ctx, "sandbox_checkpoint", err)
	}
	return nil, checkpointOut{ID: ck.ID, Label: ck.Label, CreatedAt: ck.CreatedAt, SizeBytes: ck.SizeBytes, Memory: ck.Memory}, nil
}

func (t tools) restore(ctx context.Context, _ *mcp.CallToolRequest, in restoreIn) (*mcp.CallToolResult, restoreOut, error) {
	sb, err := t.s.svc.Checkpoints.Restore(ctx, t.p, in.Sandbox, in.Checkpoint)
	if err != nil {
		return nil, restoreOut{}, t.s.publicError(ctx, "sandbox_restore", err)
	}
	return nil, restoreOut{Name: sb.Name, Status: string(sb.Status)}, nil
}

func (t tools) destroy(ctx context.Context, _ *mcp.CallToolRequest, in destroyIn) (*mcp.CallToolResult, destroyOut, error) {
	if err := t.s.svc.Sandboxes.Destroy(ctx, t.p, in.Sandbox); err != nil {
		return nil, destroyOut{}, t.s.publicError(ctx, "sandbox_destroy", err)
	}
	return nil, destroyOut{Destroyed: in.Sandbox}, nil
}

func (t tools) list(ctx context.Context, _ *mcp.CallToolRequest, in listIn) (*mcp.CallToolResult, listOut, error) {
	sbs, err := t.s.svc.Sandboxes.List(ctx, t.p)
	if err != nil {
		return nil, listOut{}, t.s.publicError(ctx, "sandbox_list", err)
	}
	rep, err := t.s.svc.Tenancy.Limits(ctx, t.p)
	if err != nil {
		return nil, listOut{}, t.s.publicError(ctx, "sandbox_list", err)
	}
	out := listOut{Sandboxes: []listItem{}}
	for _, sb := range sbs {
		// The name is the one that reaches the sandbox: TENANT/NAME for an
		// operator's view of a tenant's. The filter matches it as the
		// caller spells it, with or without its attribution prefix.
		name := t.p.RefOf(sb.Tenant, sb.Name)
		if in.Filter != "" && !strings.HasPrefix(name, in.Filter) && !strings.HasPrefix(name, t.p.Resolve(in.Filter)) {
			continue
		}
		out.Sandboxes = append(out.Sandboxes, listItem{Name: name, Status: string(sb.Status), Size: sb.Size, ExpiresAt: sb.ExpiresAt})
	}
	if q := rep.Sandboxes; q != nil {
		out.Usage = usage{Summary: fmt.Sprintf("%d of %d sandboxes", q.Used, q.Limit), Used: q.Used, Limit: q.Limit}
	} else {
		out.Usage = usage{Summary: fmt.Sprintf("%d sandboxes; no quota", len(sbs)), Used: len(sbs)}
	}
	return nil, out, nil
}

// duration reads a duration argument the way the API does (sandbox.Duration:
// a number of seconds or a string such as "90s"); absent is zero, one too
// long to hold is refused as too long, a negative one as negative.
func duration(field string, v any) (sandbox.Duration, error) {
	var d sandbox.Duration
	if v == nil {
		return 0, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return 0, sandbox.Errorf(sandbox.CodeInvalidArgument, "invalid %s", field)
	}
	if err := d.UnmarshalJSON(b); err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, sandbox.Errorf(sandbox.CodeInvalidArgument, "%s must not be negative", field)
	}
	return d, nil
}
