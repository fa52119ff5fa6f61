package httpapi

import (
	"errors"
	"net/http"

	"github.com/hearth/hearth/sandbox"
)

// handleReadFile streams the file as application/octet-stream. lifecycle
// reports errors before the first byte, so the headers wait for that byte
// (or for a successful end): an early error still gets its status and JSON
// body. A failure after the first byte cannot change the status any more;
// the response is then aborted, so the client sees a truncated transfer
// rather than a short file that looks whole.
func (s *server) handleReadFile(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	q := queryParams(r, "path")
	path := q.path("path")
	if q.err != nil {
		s.writeError(w, r, q.err)
		return
	}
	release, ok := s.holdConn(w, r, p)
	if !ok {
		return
	}
	defer release()
	out := &lazyWriter{w: w}
	err := s.svc.Files.ReadFile(r.Context(), p, r.PathValue("name"), path, out)
	switch {
	case err == nil:
		out.start()
	case !out.started:
		s.writeError(w, r, err)
	default:
		noteCode(r, s.publicError(r.Context(), "read file (mid-stream)", err).Code)
		panic(http.ErrAbortHandler)
	}
}

// lazyWriter sends the 200 headers of a file download on its first Write.
type lazyWriter struct {
	w       http.ResponseWriter
	started bool
}

func (l *lazyWriter) start() {
	if l.started {
		return
	}
	l.started = true
	l.w.Header().Set("Content-Type", "application/octet-stream")
	l.w.Header().Set("X-Content-Type-Options", "nosniff")
	l.w.WriteHeader(http.StatusOK)
}

func (l *lazyWriter) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	l.start()
	return l.w.Write(b)
}

// handleWriteFile writes the raw request body to ?path=. The route checks
// first that the caller may see the sandbox (visibleFirst); a
// Content-Length over the limit is then refused with 413 before a byte of
// the body is read; a body without one (chunked) is cut at the limit by
// lifecycle (MaxBytes) and, should that not stop it, by a MaxBytesReader
// one byte further.
//
// Query: path (required); mode (octal; when given it is applied to an
// existing file too, unless set_mode=false); set_mode; parents; max_bytes (a
// lower limit than the daemon's).
func (s *server) handleWriteFile(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	q := queryParams(r, "path", "mode", "set_mode", "parents", "max_bytes")
	req := sandbox.WriteRequest{Path: q.path("path"), Parents: q.bool("parents")}
	mode, hasMode := q.mode("mode")
	req.Mode, req.SetMode = mode, hasMode
	if q.q.Has("set_mode") {
		req.SetMode = q.bool("set_mode")
	}
	limit := s.svc.Files.MaxWriteBytes()
	if n := q.int64("max_bytes"); n > 0 && n < limit {
		limit = n
	}
	req.MaxBytes = limit
	if q.err != nil {
		s.writeError(w, r, q.err)
		return
	}
	if err := WriteTooLarge(r.ContentLength, limit); err != nil {
		s.writeError(w, r, err)
		return
	}
	release, ok := s.holdConn(w, r, p)
	if !ok {
		return
	}
	defer release()
	body := &readErrReader{r: http.MaxBytesReader(w, r.Body, limit+1)}
	info, err := s.svc.Files.WriteFile(r.Context(), p, r.PathValue("name"), req, body)
	var tooBig *http.MaxBytesError
	switch {
	case err == nil, sandbox.ErrorCode(err) != sandbox.CodeInternal:
	case errors.As(body.err, &tooBig):
		err = tooLarge(-1, limit)
	case body.err != nil:
		s.log.Debug("write file: request body broke", "err", body.err)
		err = sandbox.Errorf(sandbox.CodeInvalidArgument, "the request body broke off: %v", body.err).
			WithHint("nothing was written; send the whole content again")
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.encode(w, http.StatusOK, info)
}

// WriteTooLarge is the too_large error of a file write whose
// Content-Length, size, is over limit (nil when it is not, or unknown, -1):
// the doors call it before reading the body.
func WriteTooLarge(size, limit int64) error {
	if size <= limit {
		return nil
	}
	return tooLarge(size, limit)
}

// tooLarge is the error of a write over limit; size is -1 when unknown
// (a chunked body).
func tooLarge(size, limit int64) error {
	e := sandbox.Errorf(sandbox.CodeTooLarge, "file content is larger than the %d-byte limit", limit)
	if size >= 0 {
		e = sandbox.Errorf(sandbox.CodeTooLarge, "file content of %d bytes is larger than the %d-byte limit", size, limit).With("size", size)
	}
	return e.With("max_bytes", limit).
		WithHint("write at most %d bytes per request: split the data, or ask the operator to raise `hearth serve --max-write-bytes`", limit)
}

// entries is the body of GET .../fs/list.
type entries struct {
	Entries []sandbox.FileInfo `json:"entries"`
}

func (s *server) handleListDir(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	q := queryParams(r, "path")
	path := q.path("path")
	if q.err != nil {
		s.writeError(w, r, q.err)
		return
	}
	list, err := s.svc.Files.ListDir(r.Context(), p, r.PathValue("name"), path)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if list == nil {
		list = []sandbox.FileInfo{}
	}
	s.encode(w, http.StatusOK, entries{Entries: list})
}

func (s *server) handleStat(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	q := queryParams(r, "path")
	path := q.path("path")
	if q.err != nil {
		s.writeError(w, r, q.err)
		return
	}
	info, err := s.svc.Files.Stat(r.Context(), p, r.PathValue("name"), path)
	s.fileInfo(w, r, info, err)
}

func (s *server) handleMkdir(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	q := queryParams(r, "path")
	path := q.path("path")
	if q.err != nil {
		s.writeError(w, r, q.err)
		return
	}
	info, err := s.svc.Files.Mkdir(r.Context(), p, r.PathValue("name"), path)
	s.fileInfo(w, r, info, err)
}

func (s *server) handleRemove(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	q := queryParams(r, "path", "recursive")
	path, recursive := q.path("path"), q.bool("recursive")
	if q.err != nil {
		s.writeError(w, r, q.err)
		return
	}
	if err := s.svc.Files.Remove(r.Context(), p, r.PathValue("name"), path, recursive); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.encode(w, http.StatusNoContent, nil)
}

func (s *server) handleRename(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	q := queryParams(r, "from", "to")
	from, to := q.path("from"), q.path("to")
	if q.err != nil {
		s.writeError(w, r, q.err)
		return
	}
	info, err := s.svc.Files.Rename(r.Context(), p, r.PathValue("name"), from, to)
	s.fileInfo(w, r, info, err)
}

func (s *server) handleChmod(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	q := queryParams(r, "path", "mode")
	path := q.path("path")
	mode, ok := q.mode("mode")
	if !ok {
		q.fail(sandbox.Errorf(sandbox.CodeInvalidArgument, "missing query parameter \"mode\"").
			WithHint("add ?mode=<octal permission bits>, e.g. mode=0755"))
	}
	if q.err != nil {
		s.writeError(w, r, q.err)
		return
	}
	info, err := s.svc.Files.Chmod(r.Context(), p, r.PathValue("name"), path, mode)
	s.fileInfo(w, r, info, err)
}

// fileInfo answers the FileInfo result of a file operation, or its error.
func (s *server) fileInfo(w http.ResponseWriter, r *http.Request, info sandbox.FileInfo, err error) {
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.encode(w, http.StatusOK, info)
}
