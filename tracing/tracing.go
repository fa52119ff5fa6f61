// Package tracing sends hearth's traces to an OpenTelemetry collector
// over OTLP/HTTP, with the official Go SDK, when the operator asks
// (hearth serve --otlp-endpoint); otherwise every span is the SDK's
// no-op. The packages that trace take their tracer from the global
// provider (Tracer), so turning it on changes no call site.
//
// The spans of one API call: the door's (one per call, named for its
// verb), and under it lifecycle's (the operation: create, exec,
// checkpoint, restore), and under that the node's (a runtime start, a
// snapshot, a memory checkpoint, a rollback) and the agent's (a command
// run through the sandbox's agent).
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tracer is the tracer of the package called name (its import path).
func Tracer(name string) trace.Tracer { return otel.Tracer(name) }

// Options configure Start.
type Options struct {
	// Endpoint is the collector's OTLP/HTTP base URL, e.g.
	// http://127.0.0.1:4318 (traces go to its /v1/traces); http sends in
	// the clear, https over TLS.
	Endpoint string
	// Node names the daemon in the spans' resource (service.instance.id).
	Node string
	// Version is hearth's (service.version).
	Version string
	// BatchTimeout is how long spans wait to be sent together (0: the
	// SDK's default, 5s, or $OTEL_BSP_SCHEDULE_DELAY in milliseconds).
	BatchTimeout time.Duration
	// Logger receives the exporter's errors; nil discards.
	Logger *slog.Logger
}

// Start sends the spans of this process to opts.Endpoint from now on,
// propagating trace context in W3C headers, and returns the function
// that sends what is left and stops. A bad endpoint is an error.
func Start(ctx context.Context, opts Options) (shutdown func(context.Context) error, err error) {
	u, err := url.Parse(opts.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("tracing: endpoint %q: want an http:// or https:// URL of an OTLP/HTTP collector", opts.Endpoint)
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u.JoinPath("v1", "traces").String()))
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	res := resource.NewSchemaless(
		attribute.String("service.name", "hearth"),
		attribute.String("service.version", opts.Version),
		attribute.String("service.instance.id", opts.Node),
	)
	var batch []sdktrace.BatchSpanProcessorOption
	if opts.BatchTimeout > 0 {
		batch = append(batch, sdktrace.WithBatchTimeout(opts.BatchTimeout))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, batch...), sdktrace.WithResource(res))
	if opts.Logger != nil {
		log := opts.Logger
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing: export", "err", err) }))
	}
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return tp.Shutdown, nil
}

// End ends span, marking it failed with err when err is not nil.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
