package kube

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"

	"github.com/hearth/hearth/sandbox"
)

// Limits of kubectl logs: the most lines one answer holds (the newest;
// hearth's GET /v1/audit has the same), and how often a followed log
// looks for new calls.
const (
	maxLogLines = 10000
	followEvery = time.Second
)

// GetContainerLogs answers kubectl logs on a sandbox's Pod with the
// sandbox's calls: one line per call made on it since it was created,
// through any door (its audit events as the tenant's admin reads them,
// see Sandboxes.Calls), oldest first, each a logfmt line: when it came,
// the verb, the door, who made it, its HTTP status and error code, and
// how long it took. A sandbox's processes' output goes to whoever ran
// them; a sandbox has no main process of its own whose output these
// would be. --tail, --since, --since-time, --limit-bytes, --timestamps
// and --follow (new calls a second or so after they end) are honoured;
// --previous is refused: a sandbox's Pod has one container, never
// restarted. The call is audited as audit.list on the sandbox.
func (p *Provider) GetContainerLogs(ctx context.Context, ns, name, _ string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	start := time.Now()
	r, err := p.containerLogs(ctx, ns, name, opts)
	if tenant, ok := tenantOf(ns); ok {
		p.record(podActor(tenant), "audit.list", name, start, err)
	}
	return r, err
}

func (p *Provider) containerLogs(ctx context.Context, ns, name string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	tenant, ok := tenantOf(ns)
	switch {
	case !ok:
		return nil, errdefs.NotFoundf("namespace %s holds no hearth sandbox", ns)
	case opts.Previous:
		return nil, errdefs.InvalidInput("a hearth sandbox's Pod has one container, never restarted: there are no previous logs")
	}
	f := sandbox.AuditFilter{Since: opts.SinceTime, Limit: opts.Tail}
	if opts.SinceSeconds > 0 {
		f.Since = time.Now().Add(-time.Duration(opts.SinceSeconds) * time.Second)
	}
	if f.Limit <= 0 || f.Limit > maxLogLines {
		f.Limit = maxLogLines
	}
	l := callLog{p: p, actor: podActor(tenant), name: name, timestamps: opts.Timestamps}
	events, err := l.calls(ctx, f)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	last := l.write(&b, events, 0)
	var out io.ReadCloser = io.NopCloser(&b)
	if opts.Follow {
		pr, pw := io.Pipe()
		go l.follow(ctx, pw, b.Bytes(), f.Since, last)
		out = pr
	}
	if opts.LimitBytes > 0 {
		out = limitedReadCloser{io.LimitReader(out, int64(opts.LimitBytes)), out}
	}
	return out, nil
}

// callLog writes the calls on one sandbox, as an actor reads them, as
// log lines.
type callLog struct {
	p          *Provider
	actor      sandbox.Principal
	name       string
	timestamps bool
}

// calls are the sandbox's calls that match f, once those recorded here
// are in the store; a sandbox that is not there is errdefs' not found.
func (l callLog) calls(ctx context.Context, f sandbox.AuditFilter) ([]sandbox.AuditEvent, error) {
	if l.p.flush != nil {
		l.p.flush(ctx)
	}
	events, err := l.p.svc.Calls(ctx, l.actor, l.name, f)
	if sandbox.IsCode(err, sandbox.CodeNotFound) {
		return nil, errdefs.AsNotFound(err)
	}
	return events, err
}

// write writes events to w, one line each, and returns the greatest id
// of them (last when that is greater).
func (l callLog) write(w io.Writer, events []sandbox.AuditEvent, last int64) int64 {
	var line bytes.Buffer
	h := slog.NewTextHandler(&line, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.LevelKey || a.Key == slog.MessageKey {
			return slog.Attr{}
		}
		return a
	}})
	for _, e := range events {
		line.Reset()
		if l.timestamps {
			line.WriteString(e.At.UTC().Format(time.RFC3339Nano) + " ")
		}
		code := "ok"
		if e.Code != "" {
			code = string(e.Code)
		}
		rec := slog.NewRecord(e.At, slog.LevelInfo, "", 0)
		rec.AddAttrs(slog.String("verb", e.Verb), slog.String("door", e.Door), slog.String("tenant", e.Tenant),
			slog.String("agent", e.Agent), slog.String("role", string(e.Role)), slog.Int("status", e.Status),
			slog.String("code", code), slog.Int64("duration_ms", e.DurationMs))
		h.Handle(context.Background(), rec)
		w.Write(line.Bytes())
		last = max(last, e.ID)
	}
	return last
}

// follow writes first, then the sandbox's calls since since appended
// after the one of id last (sandbox.AuditFilter.After), looking every
// followEvery, to w until ctx ends, the reader closes, or the sandbox
// goes; it then closes w.
func (l callLog) follow(ctx context.Context, w *io.PipeWriter, first []byte, since time.Time, last int64) {
	if _, err := w.Write(first); err != nil {
		return
	}
	tick := time.NewTicker(followEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			w.Close()
			return
		case <-tick.C:
		}
		events, err := l.calls(ctx, sandbox.AuditFilter{Since: since, After: last, Limit: maxLogLines})
		if err != nil {
			w.CloseWithError(err)
			return
		}
		var b bytes.Buffer
		last = l.write(&b, events, last)
		if _, err := w.Write(b.Bytes()); err != nil {
			return
		}
	}
}

// limitedReadCloser reads through a LimitReader and closes what it
// limits.
type limitedReadCloser struct {
	io.Reader
	io.Closer
}
