package httpapi

import (
	"cmp"
	"errors"
	"net/http"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/sandbox"
)

// handleReadFile streams the file as application/octet-stream. lifecycle
// reports errors before the first byte, so the headers wait for that byte
// (or for a successful end): an early error still gets its status and JSON
// body. A failure after the first byte cannot change the status any more;
// the response is then aborted, so the client sees a truncated transfer
// rather than a short file that looks whole.
func (s files) handleReadFile(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	q := queryParams(r, "path")
	path := q.path("path")
	if q.err != nil {
		door.WriteError(w, r, q.err)
		return
	}
	release, ok := door.Hold(w, r, p)
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
		door.WriteError(w, r, err)
	default:
		door.NoteCode(r, door.PublicError(r.Context(), "read file (mid-stream)", err).Code)
		panic(http.ErrAbortHandler)
	}
}

// lazyWriter sends the 200 headers of a download (a file, an image's
// archive) on its first Write.
type lazyWriter struct {
	w http.ResponseWriter
	// contentType is the download's media type; "" is
	// application/octet-stream.
	contentType string
	started     bool
}

func (l *lazyWriter) start() {
	if l.started {
		return
	}
	l.started = true
	l.w.Header().Set("Content-Type", cmp.Or(l.contentType, "application/octet-stream"))
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
// first that the caller may see the sandbox (Route.Visible); a
// Content-Length over the limit is then refused with 413 before a byte of
// the body is read; a body without one (chunked) is cut at the limit by
// lifecycle (MaxBytes) and, should that not stop it, by a MaxBytesReader
// one byte further.
//
// Query: path (required); mode (octal; when given it is applied to an
// existing file too, unless set_mode=false); set_mode; parents; max_bytes (a
// lower limit than the daemon's).
func (s files) handleWriteFile(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
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
		door.WriteError(w, r, q.err)
		return
	}
	if err := door.WriteTooLarge(r.ContentLength, limit); err != nil {
		door.WriteError(w, r, err)
		return
	}
	release, ok := door.Hold(w, r, p)
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
		err = door.FileTooLarge(-1, limit)
	case body.err != nil:
		s.log.Debug("write file: request body broke", "err", body.err)
		err = sandbox.Errorf(sandbox.CodeInvalidArgument, "the request body broke off: %v", body.err).
			WithHint("nothing was written; send the whole content again")
	}
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	s.encode(w, http.StatusOK, info)
}

// entries is the body of GET .../fs/list.
type entries struct {
	Entries []sandbox.FileInfo `json:"entries"`
}

func (s files) handleListDir(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	q := queryParams(r, "path")
	path := q.path("path")
	if q.err != nil {
		door.WriteError(w, r, q.err)
		return
	}
	list, err := s.svc.Files.ListDir(r.Context(), p, r.PathValue("name"), path)
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	if list == nil {
		list = []sandbox.FileInfo{}
	}
	s.encode(w, http.StatusOK, entries{Entries: list})
}

func (s files) handleStat(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	q := queryParams(r, "path")
	path := q.path("path")
	if q.err != nil {
		door.WriteError(w, r, q.err)
		return
	}
	info, err := s.svc.Files.Stat(r.Context(), p, r.PathValue("name"), path)
	s.fileInfo(w, r, info, err)
}

func (s files) handleMkdir(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	q := queryParams(r, "path")
	path := q.path("path")
	if q.err != nil {
		door.WriteError(w, r, q.err)
		return
	}
	info, err := s.svc.Files.Mkdir(r.Context(), p, r.PathValue("name"), path)
	s.fileInfo(w, r, info, err)
}

func (s files) handleRemove(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	q := queryParams(r, "path", "recursive")
	path, recursive := q.path("path"), q.bool("recursive")
	if q.err != nil {
		door.WriteError(w, r, q.err)
		return
	}
	if err := s.svc.Files.Remove(r.Context(), p, r.PathValue("name"), path, recursive); err != nil {
		door.WriteError(w, r, err)
		return
	}
	s.encode(w, http.StatusNoContent, nil)
}

func (s files) handleRename(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	q := queryParams(r, "from", "to")
	from, to := q.path("from"), q.path("to")
	if q.err != nil {
		door.WriteError(w, r, q.err)
		return
	}
	info, err := s.svc.Files.Rename(r.Context(), p, r.PathValue("name"), from, to)
	s.fileInfo(w, r, info, err)
}

func (s files) handleChmod(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	q := queryParams(r, "path", "mode")
	path := q.path("path")
	mode, ok := q.mode("mode")
	if !ok {
		q.fail(sandbox.Errorf(sandbox.CodeInvalidArgument, "missing query parameter \"mode\"").
			WithHint("add ?mode=<octal permission bits>, e.g. mode=0755"))
	}
	if q.err != nil {
		door.WriteError(w, r, q.err)
		return
	}
	info, err := s.svc.Files.Chmod(r.Context(), p, r.PathValue("name"), path, mode)
	s.fileInfo(w, r, info, err)
}

// fileInfo answers the FileInfo result of a file operation, or its error.
func (s files) fileInfo(w http.ResponseWriter, r *http.Request, info sandbox.FileInfo, err error) {
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	s.encode(w, http.StatusOK, info)
}
