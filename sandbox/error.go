package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Code is a stable, machine-readable error class. The set is closed: doors,
// clients and scripts branch on these strings, so they never change meaning.
type Code string

// The closed set of error codes (ARCHITECTURE §5).
const (
	CodeQuotaExceeded    Code = "quota_exceeded"
	CodeBudgetExceeded   Code = "budget_exceeded"
	CodeRateLimited      Code = "rate_limited"
	CodeCircuitOpen      Code = "circuit_open"
	CodeNotFound         Code = "not_found"
	CodeAlreadyExists    Code = "already_exists"
	CodeInvalidArgument  Code = "invalid_argument"
	CodeTooLarge         Code = "too_large"
	CodeUnauthenticated  Code = "unauthenticated"
	CodePermissionDenied Code = "permission_denied"
	CodeTimeout          Code = "timeout"
	CodeUnavailable      Code = "unavailable"
	CodeInternal         Code = "internal"
	// CodeFailedPrecondition: the call is well formed but what it acts on
	// is not in a state that allows it (an image a sandbox still uses).
	CodeFailedPrecondition Code = "failed_precondition"
)

// codeInfo is one row of the table that maps a code to how each door renders it.
type codeInfo struct {
	httpStatus int
	exitCode   int
}

// codeTable is the one table mapping code → HTTP status → CLI exit code.
// Exit codes start at 10 so they never collide with a command's own small exit
// codes or with the shell's 126/127; 1 stays "generic failure" for the CLI.
// The statuses are numbers rather than net/http's names: hearth-agent links
// this package and must not link net/http (test/arch's TestAgentLinksNoHTTP).
var codeTable = map[Code]codeInfo{
	CodeInvalidArgument:    {400, 10},
	CodeUnauthenticated:    {401, 11},
	CodePermissionDenied:   {403, 12},
	CodeNotFound:           {404, 13},
	CodeAlreadyExists:      {409, 14},
	CodeTooLarge:           {413, 15},
	CodeQuotaExceeded:      {429, 16},
	CodeBudgetExceeded:     {429, 17},
	CodeRateLimited:        {429, 18},
	CodeCircuitOpen:        {503, 19},
	CodeTimeout:            {504, 20},
	CodeUnavailable:        {503, 21},
	CodeInternal:           {500, 22},
	CodeFailedPrecondition: {409, 23},
}

// Codes returns every code in the closed set, for tests that must cover them all.
func Codes() []Code {
	return []Code{
		CodeInvalidArgument, CodeUnauthenticated, CodePermissionDenied, CodeNotFound,
		CodeAlreadyExists, CodeTooLarge, CodeQuotaExceeded, CodeBudgetExceeded,
		CodeRateLimited, CodeCircuitOpen, CodeTimeout, CodeUnavailable, CodeInternal,
		CodeFailedPrecondition,
	}
}

// HTTPStatus is the HTTP status a door answers with for the code; unknown
// codes are internal errors.
func (c Code) HTTPStatus() int {
	if info, ok := codeTable[c]; ok {
		return info.httpStatus
	}
	return 500
}

// ExitCode is the CLI's process exit code for the code.
func (c Code) ExitCode() int {
	if info, ok := codeTable[c]; ok {
		return info.exitCode
	}
	return codeTable[CodeInternal].exitCode
}

// Valid reports whether c is in the closed set.
func (c Code) Valid() bool {
	_, ok := codeTable[c]
	return ok
}

// CodeForHTTPStatus maps an HTTP status back to a code for responses that
// carry no error body (a proxy's 502, say).
func CodeForHTTPStatus(status int) Code {
	switch status {
	case 400:
		return CodeInvalidArgument
	case 401:
		return CodeUnauthenticated
	case 403:
		return CodePermissionDenied
	case 404:
		return CodeNotFound
	case 409:
		return CodeAlreadyExists
	case 413:
		return CodeTooLarge
	case 429:
		return CodeRateLimited
	case 504, 408:
		return CodeTimeout
	case 503, 502:
		return CodeUnavailable
	}
	return CodeInternal
}

// Error is the one error type that leaves the daemon. Message says what
// happened, with the numbers; Hint says what to do next; Details carries the
// numbers for machines (limit, used, retry_after_seconds, max_bytes, …).
// Message and Hint are safe to show to any caller: causes that are not are
// logged, never put here.
type Error struct {
	Code    Code           `json:"code"`
	Message string         `json:"message"`
	Hint    string         `json:"hint,omitempty"`
	Details map[string]any `json:"details,omitempty"`
}

// Error renders "message (hint)" so that a plain log line carries both.
func (e *Error) Error() string {
	if e.Hint == "" {
		return e.Message
	}
	return e.Message + "; " + e.Hint
}

// Text is how every door shows e to a person or a model: the line
// "error: <message>" and, when there is a hint, the line "hint: <hint>",
// each ending in a newline. The CLI prints it on stderr and the MCP door
// returns it as a failed tool call's text, so the two doors cannot drift.
func (e *Error) Text() string {
	if e.Hint == "" {
		return "error: " + e.Message + "\n"
	}
	return "error: " + e.Message + "\nhint: " + e.Hint + "\n"
}

// Errorf builds an Error with a formatted message and no hint.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// WithHint returns e with its hint set, for chaining after Errorf.
func (e *Error) WithHint(format string, args ...any) *Error {
	e.Hint = fmt.Sprintf(format, args...)
	return e
}

// DetailMovedTo is the detail of an unavailable error whose sandbox moved
// to another node to wake (lifecycle): that node, where the call goes
// now. A door answers it with the header door.HeaderMovedTo too.
const DetailMovedTo = "moved_to"

// With returns e with one detail set, for chaining after Errorf.
func (e *Error) With(key string, value any) *Error {
	if e.Details == nil {
		e.Details = map[string]any{}
	}
	e.Details[key] = value
	return e
}

// Number returns the detail key as an integer: set as any integer, or
// decoded from JSON (a float64); false when it is missing or not a number.
func (e *Error) Number(key string) (int64, bool) {
	switch v := e.Details[key].(type) {
	case int:
		return int64(v), true
	case int64:
		return v, true
	case float64:
		return int64(v), true
	}
	return 0, false
}

// AsError returns the *Error in err's chain, or an internal error that hides
// err's text (which may name host paths) when there is none. nil stays nil.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{
		Code:    CodeInternal,
		Message: "internal error",
		Hint:    "retry; if it persists, the daemon's log has the cause",
	}
}

// ErrorCode is the code of the *Error in err's chain, internal for any other
// error, and "" for nil.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	return AsError(err).Code
}

// IsCode reports whether err carries the code.
func IsCode(err error, code Code) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// WireError is how an Error travels to clients (the API's error bodies and
// exec end messages, MCP's error results): every key present, so that a
// client can index hint and details without guarding against their
// absence.
type WireError struct {
	Code    Code           `json:"code"`
	Message string         `json:"message"`
	Hint    string         `json:"hint"`
	Details map[string]any `json:"details"`
}

// ErrorBody is the body of every error response of the HTTP API (and the
// egress gateway's, and MCP's over HTTP): {"error": {"code", "message",
// "hint", "details"}}.
type ErrorBody struct {
	Error WireError `json:"error"`
}

// ParseErrorBody decodes b, an error response's body (ErrorBody), into
// its Error; ok is false when b is not one (no message: a proxy's page,
// say). The code is kept as sent, known to this build or not.
func ParseErrorBody(b []byte) (e *Error, ok bool) {
	var body struct {
		Error *Error `json:"error"`
	}
	if json.Unmarshal(b, &body) != nil || body.Error == nil || body.Error.Message == "" {
		return nil, false
	}
	return body.Error, true
}

// Body returns e as an error response's body.
func (e *Error) Body() ErrorBody { return ErrorBody{Error: e.Wire()} }

// Wire returns e as it travels to clients.
func (e *Error) Wire() WireError {
	details := e.Details
	if details == nil {
		details = map[string]any{}
	}
	return WireError{Code: e.Code, Message: e.Message, Hint: e.Hint, Details: details}
}
