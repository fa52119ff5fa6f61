package httpapi

import (
	"bytes"
	"cmp"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
)

// Images and registry logins. A tenant's catalog is /v1/images (list,
// pull, import, an image from a sandbox); one image is /v1/image?name=N,
// named in the query because an image's name holds '/' and ':'
// (127.0.0.1:5000/app:1.0). A pull or an import streams its progress as
// NDJSON when asked (progressStream).

// ndjson is the media type of a progress stream: one JSON object a line.
const ndjson = "application/x-ndjson"

// pullRequest is the body of POST /v1/images/pull.
type pullRequest struct {
	Ref string `json:"ref"`
	// Insecure allows plain HTTP or an unverified certificate for the
	// reference's registry, for this pull.
	Insecure bool `json:"insecure"`
	// Progress asks for the progress stream (as Accept: application/x-ndjson does).
	Progress bool `json:"progress"`
}

// imageRequest is the body of POST /v1/images: an image made from the
// sandbox From, from its checkpoint Checkpoint or, without one, from its
// disk as it is now.
type imageRequest struct {
	Name       string `json:"name"`
	From       string `json:"from"`
	Checkpoint string `json:"checkpoint"`
}

// imageFrom is the sandbox POST /v1/images makes an image of (its body's
// from), for the door to send the call to that sandbox's node; "" when
// the body is not a small JSON object naming one. The body is put back
// as it came.
func imageFrom(r *http.Request) string {
	const most = 64 << 10
	b, err := io.ReadAll(io.LimitReader(r.Body, most+1))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
	var req imageRequest
	if err != nil || len(b) > most || json.Unmarshal(b, &req) != nil {
		return ""
	}
	return req.From
}

// publicRequest is the body of POST /v1/image/public.
type publicRequest struct {
	Public *bool `json:"public"`
}

// loginRequest is the body of PUT /v1/registries/{host}.
type loginRequest struct {
	Username string `json:"username"`
	Password string `json:"password"`
	CA       string `json:"ca"`
	Insecure bool   `json:"insecure"`
}

type imageList struct {
	Images []sandbox.Image `json:"images"`
}

type loginList struct {
	Registries []sandbox.RegistryLogin `json:"registries"`
}

// imageResult is the last line of a progress stream that succeeded.
type imageResult struct {
	Image sandbox.Image `json:"image"`
}

func (s images) handlePull(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	var req pullRequest
	err := s.decode(w, r, &req)
	if err == nil {
		err = required("ref", req.Ref, `{"ref":"127.0.0.1:5000/app:1.0"}`)
	}
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	s.withProgress(w, r, req.Progress, func(progress lifecycle.Progress) (sandbox.Image, error) {
		return s.svc.Images.Pull(r.Context(), p, req.Ref, lifecycle.PullOptions{Insecure: req.Insecure, Progress: progress})
	})
}

// handleImport stores the image in the archive that is the request's
// body (docker-archive or OCI archive, as `docker save` or `skopeo copy
// … oci-archive:` write it) as ?name=. The body is streamed to the node,
// never held in memory, and has no size limit of its own: the image is
// held to its tenant's disk budget. The route is strict about its query
// (name, progress) before a byte of the body is read.
func (s images) handleImport(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	q := queryParams(r, "name", "progress")
	name, progress := q.q.Get("name"), q.bool("progress")
	if name == "" {
		q.fail(sandbox.Errorf(sandbox.CodeInvalidArgument, "missing query parameter \"name\"").
			WithHint("add ?name=<image name>, e.g. ?name=tools"))
	}
	if q.err != nil {
		door.WriteError(w, r, q.err)
		return
	}
	body := &readErrReader{r: r.Body}
	s.withProgress(w, r, progress, func(progress lifecycle.Progress) (sandbox.Image, error) {
		img, err := s.svc.Images.Import(r.Context(), p, name, body, progress)
		if code := sandbox.ErrorCode(err); body.err != nil && (code == sandbox.CodeInvalidArgument || code == sandbox.CodeInternal) {
			s.log.Debug("import: request body broke", "err", body.err)
			err = sandbox.Errorf(sandbox.CodeInvalidArgument, "the request body broke off: %v", body.err).
				WithHint("nothing was stored; send the whole archive again")
		}
		return img, err
	})
}

// handleCreate answers 201 with the image made from a sandbox.
func (s images) handleCreate(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	var req imageRequest
	err := s.decode(w, r, &req)
	const example = `{"name":"tools","from":"<sandbox>"}`
	if err == nil {
		err = required("name", req.Name, example)
	}
	if err == nil {
		err = required("from", req.From, example)
	}
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	door.NoteSandbox(r, req.From)
	img, err := s.svc.Images.FromSandbox(r.Context(), p, req.Name, req.From, req.Checkpoint)
	s.reply(w, r, http.StatusCreated, img, err)
}

func (s images) handleList(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	list, err := s.svc.Images.List(r.Context(), p)
	if list == nil {
		list = []sandbox.Image{}
	}
	s.reply(w, r, http.StatusOK, imageList{Images: list}, err)
}

func (s images) handleGet(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	img, err := s.svc.Images.Get(r.Context(), p, r.URL.Query().Get("name"))
	s.reply(w, r, http.StatusOK, img, err)
}

func (s images) handleRemove(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	if err := s.svc.Images.Remove(r.Context(), p, r.URL.Query().Get("name")); err != nil {
		door.WriteError(w, r, err)
		return
	}
	s.encode(w, http.StatusNoContent, nil)
}

func (s images) handleSetPublic(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	var req publicRequest
	err := s.decode(w, r, &req)
	if err == nil && req.Public == nil {
		err = sandbox.Errorf(sandbox.CodeInvalidArgument, "missing field %q", "public").WithHint(`send {"public":true} or {"public":false}`)
	}
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	img, err := s.svc.Images.SetPublic(r.Context(), p, r.URL.Query().Get("name"), *req.Public)
	s.reply(w, r, http.StatusOK, img, err)
}

// handleExport streams the image ?name= as an OCI archive (a tar): an
// error before its first byte gets its status and JSON body; one after
// aborts the response, so that the client sees a truncated transfer
// rather than an archive that looks whole.
func (s images) handleExport(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	name := r.URL.Query().Get("name")
	out := &lazyWriter{w: w, contentType: "application/x-tar"}
	if sandbox.ValidateImageName(name) == nil {
		// The last element of a valid name holds no quote or separator.
		base := cmp.Or(name[strings.LastIndexAny(name, "/:@")+1:], "image")
		w.Header().Set("Content-Disposition", `attachment; filename="`+base+`.tar"`)
	}
	err := s.svc.Images.Export(r.Context(), p, name, out)
	switch {
	case err == nil:
		out.start()
	case !out.started:
		w.Header().Del("Content-Disposition")
		door.WriteError(w, r, err)
	default:
		door.NoteCode(r, door.PublicError(r.Context(), "export image (mid-stream)", err).Code)
		panic(http.ErrAbortHandler)
	}
}

func (s images) handleLogin(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	var req loginRequest
	err := s.decode(w, r, &req)
	const example = `{"username":"me","password":"<password or token>"}`
	if err == nil {
		err = required("username", req.Username, example)
	}
	if err == nil {
		err = required("password", req.Password, example)
	}
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	login := sandbox.RegistryLogin{Host: r.PathValue("host"), Username: req.Username, CA: req.CA, Insecure: req.Insecure}
	got, err := s.svc.Images.Login(r.Context(), p, login, []byte(req.Password))
	s.reply(w, r, http.StatusOK, got, err)
}

func (s images) handleLogins(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	list, err := s.svc.Images.Logins(r.Context(), p)
	if list == nil {
		list = []sandbox.RegistryLogin{}
	}
	s.reply(w, r, http.StatusOK, loginList{Registries: list}, err)
}

func (s images) handleLogout(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	if err := s.svc.Images.Logout(r.Context(), p, r.PathValue("host")); err != nil {
		door.WriteError(w, r, err)
		return
	}
	s.encode(w, http.StatusNoContent, nil)
}

// withProgress runs call, an image call that reports progress, and
// answers its image. Without progress asked for (the body's or query's
// progress, or Accept: application/x-ndjson) it answers as any call does;
// with it, the answer is a progress stream (see progressStream).
func (s images) withProgress(w http.ResponseWriter, r *http.Request, asked bool, call func(lifecycle.Progress) (sandbox.Image, error)) {
	if !asked && !acceptsNDJSON(r) {
		img, err := call(nil)
		s.reply(w, r, http.StatusOK, img, err)
		return
	}
	ps := &progressStream{w: w, r: r}
	img, err := call(ps.event)
	ps.finish(img, err)
}

// acceptsNDJSON reports whether r's Accept header names the progress
// stream's media type.
func acceptsNDJSON(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(mt), ndjson) {
				return true
			}
		}
	}
	return false
}

// progressStream answers an image call as NDJSON: each progress event
// (sandbox.ImageProgress) on a line of its own, flushed as it comes, then
// one last line, {"image": {...}} or the API's error body {"error":
// {...}}. The 200 and the headers wait for the first line, so that a call
// refused before any progress (a bad name, a login it may not use) is
// answered with its status and error body as any other call. Events after
// the call returned are dropped; events from several goroutines are
// serialized.
type progressStream struct {
	w http.ResponseWriter
	r *http.Request

	mu      sync.Mutex
	started bool
	done    bool
}

// event sends ev, unless the call has returned.
func (ps *progressStream) event(ev sandbox.ImageProgress) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if !ps.done {
		ps.line(ev)
	}
}

// finish sends the call's outcome: its image or its error.
func (ps *progressStream) finish(img sandbox.Image, err error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.done = true
	if err == nil {
		ps.line(imageResult{Image: img})
		return
	}
	if !ps.started {
		door.WriteError(ps.w, ps.r, err)
		return
	}
	e := door.PublicError(ps.r.Context(), ps.r.Method+" "+ps.r.URL.Path, err)
	door.NoteCode(ps.r, e.Code)
	ps.line(e.Body())
}

// line writes v as one line and flushes it; ps.mu is held. Write errors
// are ignored: a client that went away ends the call through its
// context.
func (ps *progressStream) line(v any) {
	b, _ := json.Marshal(v) // the API's own types
	if !ps.started {
		ps.started = true
		h := ps.w.Header()
		h.Set("Content-Type", ndjson)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		ps.w.WriteHeader(http.StatusOK)
	}
	ps.w.Write(append(b, '\n'))
	http.NewResponseController(ps.w).Flush()
}
