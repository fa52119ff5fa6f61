// Package spritesapi is the Sprites-compatible door: /v1/sprites… as the
// Sprites clients (sprites-go, @fly/sprites, sprites-py and the agent
// adapters built on them) speak it, so that they work against hearth by
// changing only their base URL and token. docs/SPRITES.md says what is
// served and how it maps onto hearth; ../shared/SPRITES-API.md is the wire
// reference this follows.
//
// It is an adapter and nothing more: every route decodes the Sprites
// request, calls the one lifecycle method the native API calls for the same
// operation, with the caller's Principal, and encodes the answer in Sprites'
// shapes. New returns its routes as a door.Door, which the door chain
// serves beside the native API and MCP: the chain authenticates the bearer
// token, audits each call under door "sprites", counts it in the metrics
// and answers errors through writeError, the Sprites shape.
package spritesapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/door/execstream"
	"github.com/hearth/hearth/sandbox"
)

// Service is the lifecycle the door drives: the parts of lifecycle.Service
// it calls, field by field (lifecycle.Service's fields of the same names).
type Service struct {
	Sandboxes   Sandboxes
	Processes   Processes
	Files       Files
	Checkpoints Checkpoints
	Tenancy     Tenancy
}

// Sandboxes is what the door calls of lifecycle.Sandboxes.
type Sandboxes interface {
	Create(ctx context.Context, p sandbox.Principal, req sandbox.CreateRequest) (sandbox.Sandbox, bool, error)
	Get(ctx context.Context, p sandbox.Principal, name string) (sandbox.Sandbox, error)
	List(ctx context.Context, p sandbox.Principal) ([]sandbox.Sandbox, error)
	Update(ctx context.Context, p sandbox.Principal, name string, u sandbox.SandboxUpdate) (sandbox.Sandbox, error)
	Destroy(ctx context.Context, p sandbox.Principal, name string) error
}

// Processes is what the door calls of lifecycle.Processes.
type Processes interface {
	Exec(ctx context.Context, p sandbox.Principal, name string, req sandbox.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (sandbox.ExecResult, error)
	Connect(ctx context.Context, p sandbox.Principal, name string, port int) (net.Conn, error)
}

// Files is what the door calls of lifecycle.Files.
type Files interface {
	ReadFile(ctx context.Context, p sandbox.Principal, name, path string, w io.Writer) error
	WriteFile(ctx context.Context, p sandbox.Principal, name string, req sandbox.WriteRequest, r io.Reader) (sandbox.FileInfo, error)
	ListDir(ctx context.Context, p sandbox.Principal, name, path string) ([]sandbox.FileInfo, error)
	Stat(ctx context.Context, p sandbox.Principal, name, path string) (sandbox.FileInfo, error)
	Mkdir(ctx context.Context, p sandbox.Principal, name, path string) (sandbox.FileInfo, error)
	Remove(ctx context.Context, p sandbox.Principal, name, path string, recursive bool) error
	Rename(ctx context.Context, p sandbox.Principal, name, from, to string) (sandbox.FileInfo, error)
	Chmod(ctx context.Context, p sandbox.Principal, name, path string, mode fs.FileMode) (sandbox.FileInfo, error)
	MaxWriteBytes() int64
}

// Checkpoints is what the door calls of lifecycle.Checkpoints.
type Checkpoints interface {
	Checkpoint(ctx context.Context, p sandbox.Principal, name string, req sandbox.CheckpointRequest) (sandbox.Checkpoint, error)
	ListCheckpoints(ctx context.Context, p sandbox.Principal, name string) ([]sandbox.Checkpoint, error)
	Restore(ctx context.Context, p sandbox.Principal, name, id string) (sandbox.Sandbox, error)
}

// Tenancy is what the door calls of lifecycle.Tenancy.
type Tenancy interface {
	Limits(ctx context.Context, p sandbox.Principal) (sandbox.LimitsReport, error)
}

// Options configure the door. The zero value works.
type Options struct {
	// Logger receives stream failures; nil discards.
	Logger *slog.Logger
	// BaseDomain is the daemon's sandbox domain (httpapi.Options.BaseDomain): sprite URLs are then hosts
	// {port}-{name}.{BaseDomain}.
	BaseDomain string
	// Keepalive is how long an exec stream may stay silent before the door
	// sends a keepalive message (10s): the JavaScript SDK, which cannot see
	// WebSocket pings, gives up after 45 s without a message.
	Keepalive time.Duration
}

// Version is the Sprite-Version every response carries: a release version,
// which tells sprites-go to use the current attach and signal forms.
const Version = "1.0.0"

// maxJSONBody bounds a JSON request body.
const maxJSONBody = 1 << 20

// server holds what the handlers need.
type server struct {
	svc       Service
	log       *slog.Logger
	keepalive time.Duration
	domain    string
	exec      *execstream.Runner
	// sessions numbers exec sessions: Sprites clients want a string id.
	sessions atomic.Int64
}

// New returns the door over svc, for door.Chain.Handler.
func New(svc Service, opts Options) *door.Door {
	d := &server{svc: svc, log: opts.Logger, keepalive: opts.Keepalive, domain: opts.BaseDomain}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	d.exec = execstream.New(svc.Processes, svc.Files, d.log)
	if d.keepalive <= 0 {
		d.keepalive = 10 * time.Second
	}
	return &door.Door{
		Name:       sandbox.DoorSprites,
		Prefix:     "/v1/sprites",
		Header:     http.Header{"Sprite-Version": {Version}},
		Routes:     d.routes(),
		WriteError: writeError,
	}
}

// routes lists every route of the door with its verb, the native verb of
// the same operation. Routes that read a body or messages about a sprite
// are Visible (the chain checks that the caller may see it first); the
// long-lived ones are Streams (each holds one of the caller's
// connections).
func (d *server) routes() []door.Route {
	return []door.Route{
		{Pattern: "POST /v1/sprites", Verb: "sandbox.create", Handle: d.handleCreate},
		{Pattern: "GET /v1/sprites", Verb: "sandbox.list", Handle: d.handleList},
		{Pattern: "GET /v1/sprites/{name}", Verb: "sandbox.get", Handle: d.handleGet},
		{Pattern: "PUT /v1/sprites/{name}", Verb: "sandbox.update", Handle: d.handleUpdate, Visible: true},
		{Pattern: "DELETE /v1/sprites/{name}", Verb: "sandbox.destroy", Handle: d.handleDelete},

		// The exec WebSocket checks the sprite itself: a HEAD answers
		// without one.
		{Pattern: "GET /v1/sprites/{name}/exec", Verb: "sandbox.exec", Handle: d.handleExec, Stream: true},
		{Pattern: "POST /v1/sprites/{name}/exec", Verb: "sandbox.exec", Handle: d.handleHTTPExec, Visible: true, Stream: true},
		{Pattern: "GET /v1/sprites/{name}/control", Verb: "sprite.control", Handle: d.handleControl},
		{Pattern: "GET /v1/sprites/{name}/proxy", Verb: "sandbox.proxy", Handle: d.handleTCPProxy, Visible: true, Stream: true},
		{Pattern: "GET /v1/sprites/{name}/policy/network", Verb: "sandbox.get", Handle: d.handleGetNetworkPolicy},
		{Pattern: "POST /v1/sprites/{name}/policy/network", Verb: "sandbox.update", Handle: d.handleSetNetworkPolicy, Visible: true},
		{Pattern: "PUT /v1/sprites/{name}/policy/network", Verb: "sandbox.update", Handle: d.handleSetNetworkPolicy, Visible: true},

		{Pattern: "GET /v1/sprites/{name}/fs/read", Verb: "fs.read", Handle: d.handleRead, Stream: true},
		{Pattern: "PUT /v1/sprites/{name}/fs/write", Verb: "fs.write", Handle: d.handleWrite, Visible: true, Stream: true},
		{Pattern: "GET /v1/sprites/{name}/fs/list", Verb: "fs.list", Handle: d.handleListDir},
		{Pattern: "DELETE /v1/sprites/{name}/fs/delete", Verb: "fs.remove", Handle: d.handleDeleteFile, Visible: true},
		{Pattern: "POST /v1/sprites/{name}/fs/rename", Verb: "fs.rename", Handle: d.handleRename, Visible: true},
		{Pattern: "POST /v1/sprites/{name}/fs/chmod", Verb: "fs.chmod", Handle: d.handleChmod, Visible: true},

		{Pattern: "POST /v1/sprites/{name}/checkpoint", Verb: "checkpoint.create", Handle: d.handleCheckpoint, Visible: true},
		{Pattern: "GET /v1/sprites/{name}/checkpoints", Verb: "checkpoint.list", Handle: d.handleListCheckpoints},
		{Pattern: "GET /v1/sprites/{name}/checkpoints/{id}", Verb: "checkpoint.get", Handle: d.handleGetCheckpoint},
		{Pattern: "POST /v1/sprites/{name}/checkpoints/{id}/restore", Verb: "sandbox.restore", Handle: d.handleRestore},
	}
}

// errorBody is the error body every Sprites client parses: "error" a code
// or short text, "message" what a person reads (the SDKs show it), and the
// numbers of a limit.
type errorBody struct {
	Error             string `json:"error"`
	Message           string `json:"message"`
	Limit             *int64 `json:"limit,omitempty"`
	CurrentCount      *int64 `json:"current_count,omitempty"`
	WindowSeconds     *int64 `json:"window_seconds,omitempty"`
	RetryAfterSeconds *int64 `json:"retry_after_seconds,omitempty"`
	// Code is hearth's own error code, for clients that know hearth.
	Code sandbox.Code `json:"code"`
}

// Sprites' machine codes of a refused create, both 429.
const (
	errConcurrentLimit = "concurrent_sprite_limit_exceeded"
	errCreationRate    = "sprite_creation_rate_limited"
)

// writeError answers e in the Sprites shape: hearth's message and its next
// step in "message", the limits in the fields the SDKs read. A refusal by
// quota or budget is concurrent_sprite_limit_exceeded, one by the
// create-rate breaker sprite_creation_rate_limited with Retry-After, both
// 429; every other code keeps its status and names itself in "error". A
// file error (see fsErr) has the filesystem API's shape instead.
func writeError(w http.ResponseWriter, _ *http.Request, status int, e *sandbox.Error) {
	if errno, ok := e.Details["errno"].(string); ok {
		if path, ok := e.Details["path"].(string); ok {
			encode(w, fsErrorStatus(errno, status), fsErrorBody{Error: e.Error(), Code: errno, Path: path})
			return
		}
	}
	body := errorBody{Error: string(e.Code), Message: e.Error(), Code: e.Code}
	switch {
	case e.Code == sandbox.CodeQuotaExceeded, e.Code == sandbox.CodeBudgetExceeded:
		status, body.Error = http.StatusTooManyRequests, errConcurrentLimit
		body.Limit, body.CurrentCount = detail(e, "limit"), detail(e, "used")
	case e.Code == sandbox.CodeRateLimited && detail(e, "current_count") != nil:
		// The caller's connection limit: no Sprites code says it, so it
		// keeps hearth's, with the numbers where the SDKs read them.
		body.Limit, body.CurrentCount = detail(e, "limit"), detail(e, "current_count")
	case e.Code == sandbox.CodeCircuitOpen, e.Code == sandbox.CodeRateLimited:
		status, body.Error = http.StatusTooManyRequests, errCreationRate
		body.Limit, body.RetryAfterSeconds = detail(e, "limit"), detail(e, "retry_after_seconds")
		window := int64(60)
		body.WindowSeconds = &window
	case e.Code == sandbox.CodeUnavailable:
		// A call queued past its deadline (lifecycle's heavy work)
		// says when a retry may get through.
		body.RetryAfterSeconds = detail(e, "retry_after_seconds")
	}
	if body.RetryAfterSeconds != nil {
		w.Header().Set("Retry-After", strconv.FormatInt(*body.RetryAfterSeconds, 10))
	}
	encode(w, status, body)
}

// detail returns e's numeric detail key, or nil.
func detail(e *sandbox.Error, key string) *int64 {
	if n, ok := e.Number(key); ok {
		return &n
	}
	return nil
}

// encode answers v as JSON with status.
func encode(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(errorBody{Error: string(sandbox.CodeInternal), Message: "internal error: encode the response", Code: sandbox.CodeInternal})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// decode reads r's JSON body into v leniently, as the Sprites clients
// expect: unknown fields are ignored and an empty body is the zero value.
// A body over maxJSONBody is too_large (refused before a byte is read when
// its Content-Length says so); bad JSON, and JSON that is no object (null
// included), invalid_argument.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	if err := door.BodyTooLarge(r, maxJSONBody, door.BodyHint); err != nil {
		return err
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return door.TooLarge(-1, tooBig.Limit, door.BodyHint)
		}
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "reading the request body: %v", err)
	}
	return decodeBody(b, v)
}

// decodeBody is decode's decoding of the body b.
func decodeBody(b []byte, v any) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil
	}
	if b[0] != '{' {
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "malformed JSON body: expected an object").WithHint("send one JSON object")
	}
	if err := json.Unmarshal(b, v); err != nil {
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "malformed JSON body: %v", err).WithHint("send one JSON object")
	}
	return nil
}
