package door

import (
	"net/http"

	"github.com/hearth/hearth/sandbox"
)

// BodyHint is what a too_large error for a JSON body advises.
const BodyHint = "JSON requests are small; file content goes in the body of a file write"

// BodyTooLarge is the too_large error of a request whose Content-Length
// is over limit (details size and max_bytes, and hint), or nil when it
// has none or a smaller one: a door calls it before reading the body, and
// cuts a body without a length (chunked) at the limit as it reads
// (TooLarge with size -1).
func BodyTooLarge(r *http.Request, limit int64, hint string) error {
	if r.ContentLength <= limit {
		return nil
	}
	return TooLarge(r.ContentLength, limit, hint)
}

// TooLarge is the error of a body over limit; size is -1 when unknown (a
// chunked body cut at the limit).
func TooLarge(size, limit int64, hint string) *sandbox.Error {
	e := sandbox.Errorf(sandbox.CodeTooLarge, "request body is larger than the %d-byte limit", limit)
	if size >= 0 {
		e = sandbox.Errorf(sandbox.CodeTooLarge, "request body of %d bytes is larger than the %d-byte limit", size, limit).With("size", size)
	}
	return e.With("max_bytes", limit).WithHint("%s", hint)
}

// WriteTooLarge is the too_large error of a file write whose
// Content-Length, size, is over limit (nil when it is not, or unknown, -1):
// the doors call it before reading the body.
func WriteTooLarge(size, limit int64) error {
	if size <= limit {
		return nil
	}
	return FileTooLarge(size, limit)
}

// FileTooLarge is the error of a file write over limit; size is -1 when
// unknown (a chunked body cut at the limit).
func FileTooLarge(size, limit int64) *sandbox.Error {
	e := sandbox.Errorf(sandbox.CodeTooLarge, "file content is larger than the %d-byte limit", limit)
	if size >= 0 {
		e = sandbox.Errorf(sandbox.CodeTooLarge, "file content of %d bytes is larger than the %d-byte limit", size, limit).With("size", size)
	}
	return e.With("max_bytes", limit).
		WithHint("write at most %d bytes per request: split the data, or ask the operator to raise `hearth serve --max-write-bytes`", limit)
}
