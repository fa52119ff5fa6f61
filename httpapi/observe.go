package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/hearth/hearth/metrics"
	"github.com/hearth/hearth/sandbox"
)

// Every route runs inside observe, which after the call records its audit
// event (Options.Audit) and its metrics (Options.Metrics). What only the
// handler learns reaches observe through the call in the request's
// context: authed puts the principal there, every error answer its code.

// AuditRecorder takes the audit event of every call (audit.Recorder).
type AuditRecorder interface {
	// Record queues e for the audit log and returns at once.
	Record(e sandbox.AuditEvent)
	// Flush returns once every event recorded before it is in the log,
	// so that a read of the log that follows sees them.
	Flush(ctx context.Context) error
}

// AuditLog reads the audit log (store.AuditLog).
type AuditLog interface {
	List(ctx context.Context, f sandbox.AuditFilter) ([]sandbox.AuditEvent, error)
}

// call is what observe learns about one call while its handler runs.
type call struct {
	// principal is the authenticated caller; zero when authentication
	// failed or the route needs none.
	principal sandbox.Principal
	// sandbox names the sandbox when the path does not: a create's.
	sandbox string
	// code is the error code of the answer; empty for a success.
	code sandbox.Code
	// door is the Door whose route serves the call, or nil for a native
	// route: its errors are written in the door's dialect.
	door *Door
}

type callKey struct{}

// callOf returns the call of r, or nil outside observe.
func callOf(r *http.Request) *call {
	c, _ := r.Context().Value(callKey{}).(*call)
	return c
}

// noteCode records code as the outcome of r's call.
func noteCode(r *http.Request, code sandbox.Code) {
	if c := callOf(r); c != nil {
		c.code = code
	}
}

// route registers h for pattern as the operation verb, the stable name
// the audit log and the metrics know it by. The door is the API's, or the
// CLI's when the CLI says so in its User-Agent.
func (s *server) route(pattern, verb string, h http.Handler) {
	s.mux.Handle(pattern, s.observe(verb, "", h))
}

// routeDoor is route for a pattern that is a door of its own (door, e.g.
// sandbox.DoorMCP), whatever the caller's User-Agent.
func (s *server) routeDoor(pattern, verb, door string, h http.Handler) {
	s.mux.Handle(pattern, s.observe(verb, door, h))
}

// observe runs h and then records the call, under door when it is set. A panic in h is answered as an
// internal error (http.ErrAbortHandler, the abort of a response already
// under way, is recorded and passed on).
func (s *server) observe(verb, door string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		c := &call{}
		sw := &statusWriter{ResponseWriter: w}
		r = r.WithContext(context.WithValue(r.Context(), callKey{}, c))
		defer func() {
			v := recover()
			if v != nil && v != http.ErrAbortHandler {
				s.writeError(sw, r, fmt.Errorf("handler panic: %v\n%s", v, debug.Stack()))
			}
			s.record(verb, door, r, c, sw.status, start)
			if v == http.ErrAbortHandler {
				panic(v)
			}
		}()
		h.ServeHTTP(sw, r)
	})
}

// record reports one finished call to the audit log and the metrics; an
// empty door is the API's or the CLI's, by the User-Agent.
func (s *server) record(verb, door string, r *http.Request, c *call, status int, start time.Time) {
	d := time.Since(start)
	if status == 0 {
		status = http.StatusOK // the handler wrote nothing: net/http sends 200
	}
	code := c.code
	if code == "" && status >= 400 {
		code = sandbox.CodeForHTTPStatus(status) // an answer not written by writeError
	}
	switch {
	case door != "":
	case strings.HasPrefix(r.UserAgent(), "hearth-cli"):
		door = sandbox.DoorCLI
	default:
		door = sandbox.DoorAPI
	}
	if s.metrics != nil {
		s.metrics.observe(door, verb, c.principal.Tenant, code, status, d)
	}
	// /mcp's requests carry tool calls, which mcpserver audits one by one;
	// only a request refused here (a bad token, a foreign Origin) is an
	// event of its own.
	if s.opts.Audit == nil || verb == verbHealth || door == sandbox.DoorMCP && code == "" {
		return
	}
	name := r.PathValue("name")
	if c.sandbox != "" {
		name = c.sandbox
	}
	if name != "" {
		// One spelling per sandbox, whichever the caller wrote, so that a
		// token restricted to a name prefix reads its events and no
		// others' (see sandbox.AuditFilter).
		name = c.principal.Canonical(name)
	}
	s.opts.Audit.Record(sandbox.AuditEvent{
		At:         start.UTC(),
		Door:       door,
		Verb:       verb,
		Tenant:     c.principal.Tenant,
		Agent:      c.principal.Agent,
		Role:       c.principal.Role,
		TokenID:    c.principal.TokenID,
		Sandbox:    name,
		Code:       code,
		Status:     status,
		DurationMs: d.Milliseconds(),
	})
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

// apiMetrics are the API's metrics, in the registry of Options.Metrics.
type apiMetrics struct {
	requests, errors, creates *metrics.CounterVec
	duration, execDuration    *metrics.HistogramVec
}

// newAPIMetrics registers the API's metrics in reg, and the sandboxes
// gauge, which asks counts at every scrape.
func newAPIMetrics(reg *metrics.Registry, counts func(context.Context) (map[[2]string]int, error)) *apiMetrics {
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
	return &apiMetrics{
		requests: reg.Counter("hearth_requests_total", "API calls answered, by door, verb and error code (ok for a success).", "door", "verb", "code"),
		errors:   reg.Counter("hearth_errors_total", "API calls answered with an error, by code.", "code"),
		creates:  reg.Counter("hearth_creates_total", "Calls of POST /v1/sandboxes by the caller's tenant and result: created, resumed or the error code.", "tenant", "result"),
		duration: reg.Histogram("hearth_request_duration_seconds", "How long API calls took, by verb; an exec's is the whole command.", "verb"),
		execDuration: reg.Histogram("hearth_exec_duration_seconds",
			"How long exec WebSockets took, from the upgrade to the end of the command."),
	}
}

// observe counts one call.
func (m *apiMetrics) observe(door, verb, tenant string, code sandbox.Code, status int, d time.Duration) {
	result := string(code)
	if code == "" {
		result = "ok"
	} else {
		m.errors.Inc(result)
	}
	m.requests.Inc(door, verb, result)
	m.duration.Observe(d.Seconds(), verb)
	switch {
	case verb == verbCreate && status == http.StatusCreated:
		m.creates.Inc(tenant, "created")
	case verb == verbCreate && code == "":
		m.creates.Inc(tenant, "resumed")
	case verb == verbCreate:
		m.creates.Inc(tenant, result)
	case verb == verbExec && status == http.StatusSwitchingProtocols:
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
