package door

import (
	"context"
	"fmt"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/hearth/hearth/metrics"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/tracing"
)

// Verbs the metrics treat specially.
const (
	VerbCreate = "sandbox.create" // counted in hearth_creates_total
	VerbExec   = "sandbox.exec"   // timed in hearth_exec_duration_seconds
)

// observe runs h and then records the call: its audit event and its
// metrics. A panic in h is answered as an internal error
// (http.ErrAbortHandler, the abort of a response already under way, is
// recorded and passed on).
func (c *Chain) observe(d *Door, rt Route, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		cl := &call{chain: c, door: d}
		sw := &statusWriter{ResponseWriter: w}
		ctx := context.WithValue(r.Context(), callKey{}, cl)
		// One span per call, under the caller's trace when it sent one (a
		// control plane forwarding the call here).
		var span trace.Span
		if !rt.Quiet {
			ctx = otel.GetTextMapPropagator().Extract(ctx, propagation.HeaderCarrier(r.Header))
			ctx, span = tracer.Start(ctx, rt.Verb, trace.WithSpanKind(trace.SpanKindServer))
		}
		r = r.WithContext(ctx)
		defer func() {
			v := recover()
			if v != nil && v != http.ErrAbortHandler {
				WriteError(sw, r, fmt.Errorf("handler panic: %v\n%s", v, debug.Stack()))
			}
			code := c.record(d, rt, r, cl, sw.status, start)
			if span != nil {
				span.SetAttributes(attribute.String("hearth.tenant", cl.principal.Tenant), attribute.String("hearth.sandbox", cl.sandboxName(r)),
					attribute.String("hearth.code", string(code)), attribute.Int("http.response.status_code", sw.status))
				if code != "" {
					span.SetStatus(codes.Error, string(code))
				}
				span.End()
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
		}()
		h.ServeHTTP(sw, r)
	})
}

// tracer makes the doors' spans (see package tracing).
var tracer = tracing.Tracer("github.com/hearth/hearth/door")

// sandboxName is the sandbox of call cl on r, as the caller wrote it ("":
// none).
func (cl *call) sandboxName(r *http.Request) string {
	if cl.sandbox != "" {
		return cl.sandbox
	}
	return r.PathValue("name")
}

// record reports one finished call to the audit log and the metrics, and
// returns its error code ("" for a success).
func (c *Chain) record(d *Door, rt Route, r *http.Request, cl *call, status int, start time.Time) sandbox.Code {
	took := time.Since(start)
	if status == 0 {
		status = http.StatusOK // the handler wrote nothing: net/http sends 200
	}
	code := cl.code
	if code == "" && status >= 400 {
		code = sandbox.CodeForHTTPStatus(status) // an answer not written by WriteError
	}
	door := d.Name
	switch {
	case door != "":
	case strings.HasPrefix(r.UserAgent(), "hearth-cli"):
		door = sandbox.DoorCLI
	default:
		door = sandbox.DoorAPI
	}
	if c.metrics != nil {
		c.metrics.observe(door, rt.Verb, cl.principal.Tenant, code, status, took)
	}
	if c.opts.Audit == nil || rt.Quiet || d.AuditsCalls && code == "" || cl.sentTo != "" {
		return code
	}
	c.opts.Audit.Record(Event(cl.principal, door, rt.Verb, cl.sandboxName(r), code, status, start))
	return code
}

// Event is the audit event of one call by p through door that began at
// start: every door's, the MCP tool calls' included, is made here. name
// is the sandbox as the caller wrote it; the event holds one spelling per
// sandbox, whichever the caller wrote (Principal.Canonical), so that a
// token restricted to a name prefix reads its events and no others' (see
// sandbox.AuditFilter).
func Event(p sandbox.Principal, door, verb, name string, code sandbox.Code, status int, start time.Time) sandbox.AuditEvent {
	if name != "" {
		name = p.Canonical(name)
	}
	return sandbox.AuditEvent{
		At:         start.UTC(),
		Door:       door,
		Verb:       verb,
		Tenant:     p.Tenant,
		Agent:      p.Agent,
		Role:       p.Role,
		TokenID:    p.TokenID,
		Sandbox:    name,
		Code:       code,
		Status:     status,
		DurationMs: time.Since(start).Milliseconds(),
	}
}

// statusWriter remembers the status of the response it passes on. Unwrap
// lets http.ResponseController and the WebSocket upgrade reach the
// connection underneath.
type statusWriter struct {
	http.ResponseWriter
	status int
}

// WriteHeader keeps the final status: an informational one (101 for a
// WebSocket) until a final one follows.
func (w *statusWriter) WriteHeader(status int) {
	if w.status < http.StatusOK {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// doorMetrics are the doors' metrics, in the registry of Options.Metrics.
type doorMetrics struct {
	requests, errors, creates *metrics.CounterVec
	duration, execDuration    *metrics.HistogramVec
}

// newDoorMetrics registers the doors' metrics in reg, and, when counts is
// set, the sandboxes gauge, which asks counts at every scrape.
func newDoorMetrics(reg *metrics.Registry, counts func(context.Context) (map[[2]string]int, error)) *doorMetrics {
	if counts != nil {
		reg.GaugeFunc("hearth_sandboxes", "Sandboxes by tenant and status, at the time of the scrape (warm-pool members aside).",
			[]string{"tenant", "status"}, func() ([]metrics.Sample, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				m, err := counts(ctx)
				if err != nil {
					return nil, err
				}
				out := make([]metrics.Sample, 0, len(m))
				for k, n := range m {
					out = append(out, metrics.Sample{Labels: k[:], Value: float64(n)})
				}
				return out, nil
			})
	}
	return &doorMetrics{
		requests: reg.Counter("hearth_requests_total", "API calls answered, by door, verb and error code (ok for a success).", "door", "verb", "code"),
		errors:   reg.Counter("hearth_errors_total", "API calls answered with an error, by code.", "code"),
		creates:  reg.Counter("hearth_creates_total", "Calls of POST /v1/sandboxes by the caller's tenant and result: created, resumed or the error code.", "tenant", "result"),
		duration: reg.Histogram("hearth_request_duration_seconds", "How long API calls took, by verb; an exec's is the whole command.", "verb"),
		execDuration: reg.Histogram("hearth_exec_duration_seconds",
			"How long exec WebSockets took, from the upgrade to the end of the command."),
	}
}

// observe counts one call.
func (m *doorMetrics) observe(door, verb, tenant string, code sandbox.Code, status int, d time.Duration) {
	result := string(code)
	if code == "" {
		result = "ok"
	} else {
		m.errors.Inc(result)
	}
	m.requests.Inc(door, verb, result)
	m.duration.Observe(d.Seconds(), verb)
	switch {
	case verb == VerbCreate && status == http.StatusCreated:
		m.creates.Inc(tenant, "created")
	case verb == VerbCreate && code == "":
		m.creates.Inc(tenant, "resumed")
	case verb == VerbCreate:
		m.creates.Inc(tenant, result)
	case verb == VerbExec && status == http.StatusSwitchingProtocols:
		m.execDuration.Observe(d.Seconds())
	}
}

// CountAlarms registers in reg the counters of alarms, hearth_alarms_total
// by kind and hearth_breaker_trips_total (alarms of kind "circuit_open"),
// and returns the function that counts one: chain it into
// lifecycle.Options.Alarms. It does not block.
func CountAlarms(reg *metrics.Registry) func(sandbox.Alarm) {
	alarms := reg.Counter("hearth_alarms_total", "Alarms raised, by kind: create_rate or circuit_open.", "kind")
	trips := reg.Counter("hearth_breaker_trips_total", "Create-rate circuit breakers that opened.")
	return func(a sandbox.Alarm) {
		alarms.Inc(a.Kind)
		if a.Kind == "circuit_open" {
			trips.Inc()
		}
	}
}
