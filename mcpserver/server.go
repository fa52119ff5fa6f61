// Package mcpserver is hearth's Model Context Protocol door: eight tools
// (sandbox_create, sandbox_exec, sandbox_checkpoint, sandbox_restore,
// sandbox_destroy, sandbox_list, image_list, image_pull) over the official
// Go SDK, served over
// Streamable HTTP at /mcp (Handler) and, through `hearth mcp`, over stdio.
//
// It is a veneer over lifecycle and nothing more: each tool calls one
// lifecycle service method (svc.Processes.Exec, …) with the caller's
// Principal, as the HTTP API does, so names, limits, ownership and the
// guardrails are decided in one place. A lifecycle error becomes a tool
// result with isError set whose text is sandbox.Error.Text (exactly what
// the CLI prints for it) and whose structured content is the API's error
// object; protocol errors are left to protocol problems (an unknown tool,
// a malformed request).
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/door/execstream"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
)

// Options configure a Server. The zero value works.
type Options struct {
	// Logger receives internal errors (whose text never reaches the
	// caller) and tool panics; nil discards.
	Logger *slog.Logger
	// MaxOutputBytes is how much of each of an exec's streams (stdout,
	// stderr) a result carries (DefaultMaxOutputBytes); more is cut to its
	// head and tail, and the whole stream is saved in the sandbox.
	MaxOutputBytes int
	// AllowedOrigins are browser origins ("https://app.example.com") the
	// HTTP handler accepts besides its own and localhost's.
	AllowedOrigins []string
	// SessionTimeout closes an HTTP session that has had no request for
	// this long (DefaultSessionTimeout); a running tool call keeps its
	// session open.
	SessionTimeout time.Duration
	// MaxSessions bounds the HTTP sessions one caller (a token) holds at
	// once (DefaultMaxSessions): another initialize is refused with
	// rate_limited until one is closed or idles out.
	MaxSessions int
	// MaxBodyBytes bounds an HTTP request's body (DefaultMaxBodyBytes): a
	// larger Content-Length is refused before a byte is read, a chunked
	// body is cut at the limit.
	MaxBodyBytes int64
	// Version is the server version reported to clients.
	Version string
	// Audit, if set, receives one event per tool call (door "mcp", the
	// tool's verb as the API names it, the sandbox it named, the result's
	// code, the duration); the HTTP requests that carry the calls are not
	// audited on their own.
	Audit door.AuditRecorder
	// Extensions add to every MCP server the door builds, beside hearth's
	// own tools; the daemon has none. hearth's tests add the MCP
	// conformance suite's fixtures with one (testutil/mcpfixtures).
	Extensions []Extension
	// Forward, if set, sends a tool call on a sandbox that another node
	// runs to that node, which audits it; nil serves every call here.
	Forward Forwarder
	// ImageNode, with Forward, is set on a daemon that makes no image (a
	// fleet's control plane): it names the node an image pull goes to,
	// or answers why none can.
	ImageNode func(ctx context.Context) (string, error)
}

// An Extension adds capabilities to every MCP server the door builds. The
// door's middleware wraps what it adds as it wraps hearth's own tools: a
// failed or panicking tool call gets the door's error shape and is
// audited.
type Extension struct {
	// Configure, if set, adjusts the SDK server's options (a completion or
	// subscribe handler, say) before the server is made; the door's logger
	// and schema cache are set already.
	Configure func(*mcp.ServerOptions)
	// Register, if set, adds tools, prompts and resources to the server
	// after hearth's own.
	Register func(*mcp.Server)
}

// toolVerb names tool's operation as the API's routes do, so that the
// audit log and the metrics know one name whatever the door.
func toolVerb(tool string) string {
	switch tool {
	case "sandbox_create":
		return "sandbox.create"
	case "sandbox_exec":
		return "sandbox.exec"
	case "sandbox_checkpoint":
		return "checkpoint.create"
	case "sandbox_restore":
		return "sandbox.restore"
	case "sandbox_destroy":
		return "sandbox.destroy"
	case "sandbox_list":
		return "sandbox.list"
	case "image_list":
		return "image.list"
	case "image_pull":
		return "image.pull"
	}
	return "mcp." + tool
}

// Defaults for zero Options fields.
const (
	DefaultMaxOutputBytes = 64 << 10
	DefaultSessionTimeout = 30 * time.Minute
	DefaultMaxSessions    = 64
	DefaultMaxBodyBytes   = 1 << 20
)

// Server builds the MCP servers of the door, one per caller.
type Server struct {
	svc      *lifecycle.Service
	opts     Options
	log      *slog.Logger
	schemas  *mcp.SchemaCache
	sessions *sessionLimits
	exec     *execstream.Runner
}

// New returns the MCP door over svc.
func New(svc *lifecycle.Service, opts Options) *Server {
	if opts.MaxOutputBytes <= 0 {
		opts.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = DefaultSessionTimeout
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = DefaultMaxSessions
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	s := &Server{svc: svc, opts: opts, log: opts.Logger, schemas: mcp.NewSchemaCache(), sessions: newSessionLimits(opts.MaxSessions)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.exec = execstream.New(svc.Processes, svc.Files, s.log)
	return s
}

// For returns an MCP server with the eight tools (and what Options.Extensions
// add), every call of which acts as p. A session is bound to one principal for its life: the HTTP handler
// builds one server per session, after authenticating its first request.
func (s *Server) For(p sandbox.Principal) *mcp.Server {
	srvOpts := &mcp.ServerOptions{
		Logger:      s.log,
		SchemaCache: s.schemas,
	}
	for _, e := range s.opts.Extensions {
		if e.Configure != nil {
			e.Configure(srvOpts)
		}
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "hearth", Version: s.opts.Version}, srvOpts)
	srv.AddReceivingMiddleware(s.toolResults(p))
	t := tools{s: s, p: p}
	mcp.AddTool(srv, &mcp.Tool{
		Name:         "sandbox_create",
		OutputSchema: outputSchema[createOut](),
		Description:  "Create a sandbox, or return yours of that name.",
		Annotations:  annotations(false, false, true, false),
	}, t.create)
	mcp.AddTool(srv, &mcp.Tool{
		Name:         "sandbox_exec",
		OutputSchema: outputSchema[execOut](),
		Description:  "Run a shell command in a sandbox.",
		Annotations:  annotations(false, true, false, true),
	}, t.exec)
	mcp.AddTool(srv, &mcp.Tool{
		Name:         "sandbox_checkpoint",
		OutputSchema: outputSchema[checkpointOut](),
		Description:  "Save a sandbox's disk as a checkpoint.",
		Annotations:  annotations(false, false, false, false),
	}, t.checkpoint)
	mcp.AddTool(srv, &mcp.Tool{
		Name:         "sandbox_restore",
		OutputSchema: outputSchema[restoreOut](),
		Description:  "Reset a sandbox's disk to a checkpoint.",
		Annotations:  annotations(false, true, false, false),
	}, t.restore)
	mcp.AddTool(srv, &mcp.Tool{
		Name:         "sandbox_destroy",
		OutputSchema: outputSchema[destroyOut](),
		Description:  "Destroy a sandbox. No undo.",
		Annotations:  annotations(false, true, true, false),
	}, t.destroy)
	mcp.AddTool(srv, &mcp.Tool{
		Name:         "sandbox_list",
		OutputSchema: outputSchema[listOut](),
		Description:  "List your sandboxes and quota use.",
		Annotations:  annotations(true, false, true, false),
	}, t.list)
	mcp.AddTool(srv, &mcp.Tool{
		Name:         "image_list",
		OutputSchema: outputSchema[imageListOut](),
		Description:  "List the images you can create sandboxes from.",
		Annotations:  annotations(true, false, true, false),
	}, t.imageList)
	mcp.AddTool(srv, &mcp.Tool{
		Name:         "image_pull",
		OutputSchema: outputSchema[imagePullOut](),
		Description:  "Pull an image from a registry, for sandbox_create.",
		Annotations:  annotations(false, false, true, true),
	}, t.imagePull)
	for _, e := range s.opts.Extensions {
		if e.Register != nil {
			e.Register(srv)
		}
	}
	return srv
}

// outputSchema is the output schema of a tool whose result is Out: either
// Out, as its struct infers it, or, for an error result, {"error": the
// API's error object}. Clients that check an error result's structured
// content against the output schema (the TypeScript SDK does) then accept
// hearth's errors instead of failing the call.
func outputSchema[Out any]() *jsonschema.Schema {
	ok, err := jsonschema.For[Out](nil)
	if err != nil {
		panic(err) // the tools' own types: a bug, caught by the tests
	}
	// Kept small (every byte of tools/list is context): the error object's
	// fields are the API's, documented there.
	failed := &jsonschema.Schema{Type: "object", Required: []string{"error"},
		Properties: map[string]*jsonschema.Schema{"error": {Type: "object"}}}
	return &jsonschema.Schema{Type: "object", AnyOf: []*jsonschema.Schema{ok, failed}}
}

// annotations are a tool's hints. openWorld says the tool reaches beyond
// hearth (a command may use the network).
func annotations(readOnly, destructive, idempotent, openWorld bool) *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{ReadOnlyHint: readOnly, DestructiveHint: &destructive, IdempotentHint: idempotent, OpenWorldHint: &openWorld}
}

// toolResults is the middleware that gives every failed tools/call the
// door's error shape: the text sandbox.Error.Text, the structured content
// the API's error object. A handler's *sandbox.Error keeps its code; what
// the SDK refused before the handler ran (arguments that do not match the
// input schema) is invalid_argument. A panic in a tool is logged and
// answered as an internal error, and the server keeps serving.
//
// It also audits each call, as p.
func (s *Server) toolResults(p sandbox.Principal) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
			if method != "tools/call" {
				return next(ctx, method, req)
			}
			if res, ok := s.forwardCall(ctx, p, req); ok {
				return res, nil
			}
			start := time.Now()
			defer func() {
				if v := recover(); v != nil {
					s.log.Error("tool panic", "tool", toolName(req), "panic", v, "stack", string(debug.Stack()))
					res, err = errorResult(sandbox.AsError(fmt.Errorf("panic: %v", v))), nil
				}
				s.audit(p, req, res, start)
			}()
			res, err = next(ctx, method, req)
			r, ok := res.(*mcp.CallToolResult)
			if err != nil || !ok || !r.IsError {
				return res, err
			}
			var e *sandbox.Error
			if !errors.As(r.GetError(), &e) {
				e = sandbox.Errorf(sandbox.CodeInvalidArgument, "%s", textOf(r)).
					WithHint("the tool's input schema (tools/list) gives the arguments it takes")
			}
			return errorResult(e), nil
		}
	}
}

// audit records one tool call by p that began at start and ended with res.
func (s *Server) audit(p sandbox.Principal, req mcp.Request, res mcp.Result, start time.Time) {
	if s.opts.Audit == nil {
		return
	}
	code, status := sandbox.Code(""), http.StatusOK
	if r, ok := res.(*mcp.CallToolResult); ok && r != nil && r.IsError {
		if c, ok := r.StructuredContent.(sandbox.ErrorBody); ok {
			code, status = c.Error.Code, c.Error.Code.HTTPStatus()
		}
	}
	s.opts.Audit.Record(door.Event(p, sandbox.DoorMCP, toolVerb(toolName(req)), sandboxArg(req), code, status, start))
}

// sandboxArg is the sandbox a tools/call names: its "sandbox" argument, or
// a create's "name".
func sandboxArg(req mcp.Request) string {
	r, ok := req.(*mcp.CallToolRequest)
	if !ok || r.Params == nil {
		return ""
	}
	var args struct {
		Sandbox string `json:"sandbox"`
		Name    string `json:"name"`
	}
	json.Unmarshal(r.Params.Arguments, &args)
	if args.Sandbox != "" {
		return args.Sandbox
	}
	return args.Name
}

// toolName is the tool a tools/call request names.
func toolName(req mcp.Request) string {
	if r, ok := req.(*mcp.CallToolRequest); ok && r.Params != nil {
		return r.Params.Name
	}
	return ""
}

// textOf joins the text content of r.
func textOf(r *mcp.CallToolResult) string {
	var s string
	for _, c := range r.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			s += t.Text
		}
	}
	return s
}

// errorResult is the failed tool result for e.
func errorResult(e *sandbox.Error) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		IsError:           true,
		Content:           []mcp.Content{&mcp.TextContent{Text: e.Text()}},
		StructuredContent: e.Body(), // the API's error body
	}
}

// publicError returns the *sandbox.Error to show for err; the cause of
// any other error is logged, never sent (the exec core's rule, whose
// tool calls these are).
func (s *Server) publicError(ctx context.Context, tool string, err error) *sandbox.Error {
	return s.exec.PublicError(ctx, tool, err)
}
