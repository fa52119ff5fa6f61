package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/hearth/hearth/sandbox"
)

// fakeDaemon speaks just enough of the native API (docs/API.md) for the
// CLI's tests: sandboxes and files live in maps, and exec runs a handful of
// pretend commands (see fakeCommand). It checks the bearer token and
// answers errors with the API's error body, so that the CLI's rendering of
// them is tested against the wire format. The real daemon is tested end to
// end in test/e2e.
type fakeDaemon struct {
	token string
	// maxSandboxes is the quota: one more create is quota_exceeded.
	maxSandboxes int

	mux *http.ServeMux

	mu        sync.Mutex
	sandboxes map[string]*fakeSandbox
	order     []string // creation order, which list keeps
	seq       int
	ckSeq     int // the last checkpoint number
}

type fakeSandbox struct {
	sb          sandbox.Sandbox
	files       map[string]*fakeFile // absolute, cleaned path → file
	checkpoints []fakeCheckpoint     // oldest first
}

// fakeCheckpoint is a checkpoint and a copy of the files it saved.
type fakeCheckpoint struct {
	cp    sandbox.Checkpoint
	files map[string]*fakeFile
}

type fakeFile struct {
	dir   bool
	data  []byte
	mode  fs.FileMode
	mtime time.Time
}

// fakeHome is where relative paths start, as in a real sandbox.
const fakeHome = "/home/sandbox"

func newFakeDaemon(token string) *fakeDaemon {
	d := &fakeDaemon{token: token, maxSandboxes: 3, sandboxes: map[string]*fakeSandbox{}, mux: http.NewServeMux()}
	d.routes()
	return d
}

func (d *fakeDaemon) routes() {
	mux := d.mux
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		writeFakeJSON(w, http.StatusOK, map[string]string{"status": "ok", "runtime": "fake"})
	})
	mux.HandleFunc("POST /v1/sandboxes", d.create)
	mux.HandleFunc("GET /v1/sandboxes", d.list)
	mux.HandleFunc("GET /v1/sandboxes/{name}", d.withSandbox(func(w http.ResponseWriter, r *http.Request, s *fakeSandbox) {
		writeFakeJSON(w, http.StatusOK, s.sb)
	}))
	mux.HandleFunc("DELETE /v1/sandboxes/{name}", d.withSandbox(func(w http.ResponseWriter, r *http.Request, s *fakeSandbox) {
		delete(d.sandboxes, s.sb.Name)
		d.order = slices.DeleteFunc(d.order, func(n string) bool { return n == s.sb.Name })
		w.WriteHeader(http.StatusNoContent)
	}))
	mux.HandleFunc("POST /v1/sandboxes/{name}/checkpoints", d.withSandbox(d.checkpoint))
	mux.HandleFunc("GET /v1/sandboxes/{name}/checkpoints", d.withSandbox(func(w http.ResponseWriter, r *http.Request, s *fakeSandbox) {
		out := []sandbox.Checkpoint{}
		for _, c := range s.checkpoints {
			out = append(out, c.cp)
		}
		writeFakeJSON(w, http.StatusOK, map[string]any{"checkpoints": out})
	}))
	mux.HandleFunc("DELETE /v1/sandboxes/{name}/checkpoints/{id}", d.withSandbox(func(w http.ResponseWriter, r *http.Request, s *fakeSandbox) {
		if _, ok := s.checkpoint(w, r.PathValue("id")); ok {
			s.checkpoints = slices.DeleteFunc(s.checkpoints, func(c fakeCheckpoint) bool { return c.cp.ID == r.PathValue("id") })
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	mux.HandleFunc("POST /v1/sandboxes/{name}/restore", d.withSandbox(d.restore))
	mux.HandleFunc("POST /v1/sandboxes/{name}/fork", d.withSandbox(d.fork))
	mux.HandleFunc("POST /v1/sandboxes/{name}/sleep", d.withSandbox(func(w http.ResponseWriter, r *http.Request, s *fakeSandbox) {
		s.sb.Status, s.sb.Reason = sandbox.StatusSleeping, "asked to sleep"
		writeFakeJSON(w, http.StatusOK, s.sb)
	}))
	mux.HandleFunc("POST /v1/sandboxes/{name}/wake", d.withSandbox(func(w http.ResponseWriter, r *http.Request, s *fakeSandbox) {
		if s.sb.Status != sandbox.StatusRunning {
			s.sb.Status, s.sb.Reason = sandbox.StatusRunning, "woken"
		}
		writeFakeJSON(w, http.StatusOK, s.sb)
	}))
	mux.HandleFunc("GET /v1/sandboxes/{name}/exec", d.exec)
	mux.HandleFunc("GET /v1/sandboxes/{name}/fs/file", d.withSandbox(d.readFile))
	mux.HandleFunc("PUT /v1/sandboxes/{name}/fs/file", d.withSandbox(d.writeFile))
	mux.HandleFunc("DELETE /v1/sandboxes/{name}/fs/file", d.withSandbox(d.remove))
	mux.HandleFunc("GET /v1/sandboxes/{name}/fs/list", d.withSandbox(d.listDir))
	mux.HandleFunc("GET /v1/sandboxes/{name}/fs/stat", d.withSandbox(d.stat))
	mux.HandleFunc("POST /v1/sandboxes/{name}/fs/mkdir", d.withSandbox(d.mkdir))
	mux.HandleFunc("POST /v1/sandboxes/{name}/fs/rename", d.withSandbox(d.rename))
	mux.HandleFunc("POST /v1/sandboxes/{name}/fs/chmod", d.withSandbox(d.chmod))
}

func (d *fakeDaemon) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/health" && r.Header.Get("Authorization") != "Bearer "+d.token {
		writeFakeError(w, sandbox.Errorf(sandbox.CodeUnauthenticated, "missing or invalid token").
			WithHint("send a valid token as `Authorization: Bearer <token>` (the CLI reads HEARTH_TOKEN or --token)"))
		return
	}
	if _, pattern := d.mux.Handler(r); pattern == "" {
		writeFakeError(w, sandbox.Errorf(sandbox.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
		return
	}
	d.mux.ServeHTTP(w, r)
}

func (d *fakeDaemon) create(w http.ResponseWriter, r *http.Request) {
	var req sandbox.CreateRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeFakeError(w, sandbox.Errorf(sandbox.CodeInvalidArgument, "malformed JSON: %v", err))
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if req.Name == "" {
		d.seq++
		req.Name = fmt.Sprintf("sb-%d", d.seq)
	}
	if err := sandbox.ValidateName(req.Name); err != nil {
		writeFakeError(w, err)
		return
	}
	if s, ok := d.sandboxes[req.Name]; ok {
		writeFakeJSON(w, http.StatusOK, s.sb)
		return
	}
	s, err := d.add(req, "created")
	if err != nil {
		writeFakeError(w, err)
		return
	}
	now := s.sb.CreatedAt
	for _, dir := range []string{"/", "/home", fakeHome, "/tmp"} {
		s.files[dir] = &fakeFile{dir: true, mode: 0o755, mtime: now}
	}
	writeFakeJSON(w, http.StatusCreated, s.sb)
}

// add makes the running sandbox req asks for, without files, under the
// quota; d.mu is held.
func (d *fakeDaemon) add(req sandbox.CreateRequest, reason string) (*fakeSandbox, error) {
	if len(d.sandboxes) >= d.maxSandboxes {
		return nil, sandbox.Errorf(sandbox.CodeQuotaExceeded, "agent tester has %d of %d sandboxes", len(d.sandboxes), d.maxSandboxes).
			WithHint("destroy one you no longer need ('hearth list' shows them)").
			With("limit", d.maxSandboxes).With("used", len(d.sandboxes))
	}
	size := sandbox.DefaultSize
	if req.Size != "" {
		size = req.Size
	}
	res, err := sandbox.LookupSize(size)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC().Truncate(time.Second)
	sb := sandbox.Sandbox{
		ID: fmt.Sprintf("01fake%04d", len(d.order)+1), Name: req.Name, Tenant: "test", Owner: "tester",
		Image: cmp.Or(req.Image, "default"), Size: size, Runtime: "fake", Status: sandbox.StatusRunning,
		Reason: reason, CreatedAt: now, UpdatedAt: now,
		Capabilities: []string{sandbox.CapExec, sandbox.CapExecStdin, sandbox.CapExecTimeout, sandbox.CapFiles, "isolation:none", "runtime:fake"},
		Resources:    res,
	}
	if req.TTL > 0 {
		sb.ExpiresAt = now.Add(time.Duration(req.TTL))
	}
	s := &fakeSandbox{sb: sb, files: map[string]*fakeFile{}}
	d.sandboxes[sb.Name] = s
	d.order = append(d.order, sb.Name)
	return s, nil
}

// decodeBody decodes a JSON request body into v; an empty body leaves v
// as it is.
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && err != io.EOF {
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "malformed JSON: %v", err)
	}
	return nil
}

// checkpoint takes checkpoint ckNNNN of s: a copy of its files, whose size
// is the bytes they hold.
func (d *fakeDaemon) checkpoint(w http.ResponseWriter, r *http.Request, s *fakeSandbox) {
	var req struct {
		Label string `json:"label"`
	}
	if err := decodeBody(r, &req); err != nil {
		writeFakeError(w, err)
		return
	}
	if err := sandbox.ValidateLabel(req.Label); err != nil {
		writeFakeError(w, err)
		return
	}
	d.ckSeq++
	c := fakeCheckpoint{files: copyFiles(s.files), cp: sandbox.Checkpoint{
		ID: fmt.Sprintf("ck%04d", d.ckSeq), SandboxID: s.sb.ID, Sandbox: s.sb.Name, Label: req.Label,
		Parent: s.sb.Head, CreatedAt: time.Now().UTC().Truncate(time.Second),
	}}
	for _, f := range c.files {
		c.cp.SizeBytes += int64(len(f.data))
	}
	s.checkpoints = append(s.checkpoints, c)
	s.sb.Head = c.cp.ID
	writeFakeJSON(w, http.StatusCreated, c.cp)
}

// checkpoint returns checkpoint id of s, or answers not_found.
func (s *fakeSandbox) checkpoint(w http.ResponseWriter, id string) (fakeCheckpoint, bool) {
	for _, c := range s.checkpoints {
		if c.cp.ID == id {
			return c, true
		}
	}
	writeFakeError(w, sandbox.Errorf(sandbox.CodeNotFound, "sandbox %q has no checkpoint %q", s.sb.Name, id).
		WithHint("`hearth checkpoints %s` lists its checkpoints", s.sb.Name))
	return fakeCheckpoint{}, false
}

func (d *fakeDaemon) restore(w http.ResponseWriter, r *http.Request, s *fakeSandbox) {
	var req struct {
		Checkpoint string `json:"checkpoint"`
	}
	if err := decodeBody(r, &req); err != nil {
		writeFakeError(w, err)
		return
	}
	c, ok := s.checkpoint(w, req.Checkpoint)
	if !ok {
		return
	}
	s.files, s.sb.Head = copyFiles(c.files), c.cp.ID
	s.sb.Status, s.sb.Reason = sandbox.StatusRunning, "restored to checkpoint "+c.cp.ID
	writeFakeJSON(w, http.StatusOK, s.sb)
}

func (d *fakeDaemon) fork(w http.ResponseWriter, r *http.Request, s *fakeSandbox) {
	var req struct {
		Checkpoint string `json:"checkpoint"`
		Name       string `json:"name"`
	}
	if err := decodeBody(r, &req); err != nil {
		writeFakeError(w, err)
		return
	}
	c, ok := s.checkpoint(w, req.Checkpoint)
	if !ok {
		return
	}
	if err := sandbox.ValidateName(req.Name); err != nil {
		writeFakeError(w, err)
		return
	}
	if _, ok := d.sandboxes[req.Name]; ok {
		writeFakeError(w, sandbox.Errorf(sandbox.CodeAlreadyExists, "sandbox name %q is taken", req.Name).WithHint("fork into a new name"))
		return
	}
	f, err := d.add(sandbox.CreateRequest{Name: req.Name, Image: s.sb.Image, Size: s.sb.Size},
		fmt.Sprintf("forked from %s at checkpoint %s", s.sb.Name, c.cp.ID))
	if err != nil {
		writeFakeError(w, err)
		return
	}
	f.files = copyFiles(c.files)
	writeFakeJSON(w, http.StatusCreated, f.sb)
}

func copyFiles(files map[string]*fakeFile) map[string]*fakeFile {
	out := make(map[string]*fakeFile, len(files))
	for p, f := range files {
		c := *f
		c.data = slices.Clone(f.data)
		out[p] = &c
	}
	return out
}

func (d *fakeDaemon) list(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := []sandbox.Sandbox{}
	for _, n := range d.order {
		out = append(out, d.sandboxes[n].sb)
	}
	writeFakeJSON(w, http.StatusOK, map[string]any{"sandboxes": out})
}

// withSandbox runs h, under the lock, with the sandbox the path names, or
// answers not_found.
func (d *fakeDaemon) withSandbox(h func(http.ResponseWriter, *http.Request, *fakeSandbox)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		s, ok := d.sandboxes[r.PathValue("name")]
		if !ok {
			writeFakeError(w, notFoundSandbox(r.PathValue("name")))
			return
		}
		h(w, r, s)
	}
}

func notFoundSandbox(name string) error {
	return sandbox.Errorf(sandbox.CodeNotFound, "sandbox %q not found", name).
		WithHint("'hearth list' shows the sandboxes you can see")
}

// exec runs one pretend command over the exec WebSocket: the ExecRequest
// arrives first as text, output leaves as binary frames (stream byte,
// payload), and a final text message carries the result.
func (d *fakeDaemon) exec(w http.ResponseWriter, r *http.Request) {
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer conn.CloseNow()
	ctx := r.Context()
	_, first, err := conn.Read(ctx)
	if err != nil {
		return
	}
	var req sandbox.ExecRequest
	if err := json.Unmarshal(first, &req); err != nil {
		return
	}
	d.mu.Lock()
	_, ok := d.sandboxes[r.PathValue("name")]
	d.mu.Unlock()
	switch {
	case !ok:
		// As the daemon does: errors after the upgrade are end messages.
		sendEnd(ctx, conn, map[string]any{"type": "error", "error": wireError(notFoundSandbox(r.PathValue("name")))})
	case req.Validate() != nil:
		sendEnd(ctx, conn, map[string]any{"type": "error", "error": wireError(req.Validate())})
	default:
		sendEnd(ctx, conn, fakeCommand(ctx, conn, req))
	}
}

func sendEnd(ctx context.Context, conn *websocket.Conn, end map[string]any) {
	b, _ := json.Marshal(end)
	conn.Write(ctx, websocket.MessageText, b)
	conn.Close(websocket.StatusNormalClosure, "")
}

// fakeCommand runs req's pretend command and returns the end message:
//
//	echo ARGS...    ARGS joined by spaces, and a newline, on stdout
//	warn ARGS...    the same on stderr
//	exit N          exits N
//	cat             copies stdin to stdout
//	binary          writes bytes that are not UTF-8 to stdout
//	env             prints the request's cwd and env, sorted
//	kill SIG        is killed by signal SIG
//	sleep           runs past its timeout (killed, timed_out)
//	oom             is killed by the OOM killer
//	lost            the daemon loses the sandbox: an error message
//
// A shell script prints "sh: SCRIPT". Anything else is "not found", 127.
func fakeCommand(ctx context.Context, conn *websocket.Conn, req sandbox.ExecRequest) map[string]any {
	out := func(stream byte, s string) {
		conn.Write(ctx, websocket.MessageBinary, append([]byte{stream}, s...))
	}
	exit := func(res sandbox.ExecResult) map[string]any {
		res.DurationMs = 7
		return map[string]any{"type": "exit", "result": res}
	}
	if req.Shell != "" {
		out(1, "sh: "+req.Shell+"\n")
		return exit(sandbox.ExecResult{})
	}
	args := req.Argv[1:]
	switch req.Argv[0] {
	case "echo":
		out(1, strings.Join(args, " ")+"\n")
	case "warn":
		out(2, strings.Join(args, " ")+"\n")
	case "exit":
		n, _ := strconv.Atoi(strings.Join(args, ""))
		return exit(sandbox.ExecResult{ExitCode: n})
	case "cat":
		if !req.Stdin {
			break
		}
		for {
			typ, msg, err := conn.Read(ctx)
			if err != nil || typ != websocket.MessageBinary || len(msg) == 0 || msg[0] == 4 {
				break
			}
			if msg[0] == 0 {
				out(1, string(msg[1:]))
			}
		}
	case "binary":
		out(1, "\xff\xfe\x00ok")
	case "env":
		out(1, "cwd="+req.Cwd+"\n")
		keys := make([]string, 0, len(req.Env))
		for k := range req.Env {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			out(1, k+"="+req.Env[k]+"\n")
		}
	case "kill":
		return exit(sandbox.ExecResult{ExitCode: -1, Signal: strings.Join(args, "")})
	case "sleep":
		return exit(sandbox.ExecResult{ExitCode: -1, Signal: "SIGKILL", TimedOut: true})
	case "oom":
		return exit(sandbox.ExecResult{ExitCode: -1, Signal: "SIGKILL", OOMKilled: true})
	case "lost":
		return map[string]any{"type": "error", "error": wireError(sandbox.Errorf(sandbox.CodeUnavailable, "the sandbox's agent stopped answering").
			WithHint("retry; 'hearth get' shows the sandbox's status"))}
	default:
		out(2, "fake: "+req.Argv[0]+": not found\n")
		return exit(sandbox.ExecResult{ExitCode: 127})
	}
	return exit(sandbox.ExecResult{})
}

// filePath resolves a path as the sandbox would: relative to the home,
// cleaned.
func filePath(p string) string {
	if !path.IsAbs(p) {
		p = path.Join(fakeHome, p)
	}
	return path.Clean(p)
}

func (s *fakeSandbox) info(p string) sandbox.FileInfo {
	f := s.files[p]
	fi := sandbox.FileInfo{Name: path.Base(p), Path: p, Type: sandbox.FileRegular, Size: int64(len(f.data)),
		Mode: f.mode, ModTime: f.mtime, Owner: "sandbox", Group: "sandbox"}
	if f.dir {
		fi.Type, fi.Size = sandbox.FileDir, 4096
	}
	return fi
}

func (s *fakeSandbox) lookup(w http.ResponseWriter, p string) (*fakeFile, bool) {
	f, ok := s.files[p]
	if !ok {
		writeFakeError(w, sandbox.Errorf(sandbox.CodeNotFound, "%s: no such file or directory", p))
	}
	return f, ok
}

func (d *fakeDaemon) readFile(w http.ResponseWriter, r *http.Request, s *fakeSandbox) {
	p := filePath(r.URL.Query().Get("path"))
	f, ok := s.lookup(w, p)
	if !ok {
		return
	}
	if f.dir {
		writeFakeError(w, sandbox.Errorf(sandbox.CodeInvalidArgument, "%s is a directory", p).WithHint("use 'hearth fs ls' for directories"))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(f.data)
}

func (d *fakeDaemon) writeFile(w http.ResponseWriter, r *http.Request, s *fakeSandbox) {
	q := r.URL.Query()
	p := filePath(q.Get("path"))
	parent := path.Dir(p)
	if pf, ok := s.files[parent]; !ok || !pf.dir {
		if q.Get("parents") != "true" {
			writeFakeError(w, sandbox.Errorf(sandbox.CodeNotFound, "%s: no such directory", parent).WithHint("pass parents to create it"))
			return
		}
		s.mkdirAll(parent)
	}
	data := make([]byte, 0)
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Body.Read(buf)
		data = append(data, buf[:n]...)
		if err != nil {
			break
		}
	}
	f, ok := s.files[p]
	if !ok {
		f = &fakeFile{mode: 0o644}
		s.files[p] = f
	}
	if m := q.Get("mode"); m != "" && q.Get("set_mode") != "false" {
		mode, err := sandbox.ParseMode(m)
		if err != nil {
			writeFakeError(w, sandbox.Errorf(sandbox.CodeInvalidArgument, "invalid mode %q", m))
			return
		}
		f.mode = mode
	}
	f.data, f.mtime = data, time.Now().UTC()
	writeFakeJSON(w, http.StatusOK, s.info(p))
}

func (s *fakeSandbox) mkdirAll(p string) {
	for ; p != "/"; p = path.Dir(p) {
		if _, ok := s.files[p]; !ok {
			s.files[p] = &fakeFile{dir: true, mode: 0o755, mtime: time.Now().UTC()}
		}
	}
}

func (s *fakeSandbox) children(dir string) []string {
	var out []string
	for p := range s.files {
		if p != "/" && path.Dir(p) == dir {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

func (d *fakeDaemon) listDir(w http.ResponseWriter, r *http.Request, s *fakeSandbox) {
	p := filePath(r.URL.Query().Get("path"))
	f, ok := s.lookup(w, p)
	if !ok {
		return
	}
	if !f.dir {
		writeFakeError(w, sandbox.Errorf(sandbox.CodeInvalidArgument, "%s is not a directory", p))
		return
	}
	entries := []sandbox.FileInfo{}
	for _, c := range s.children(p) {
		entries = append(entries, s.info(c))
	}
	writeFakeJSON(w, http.StatusOK, map[string]any{"entries": entries})
}

func (d *fakeDaemon) stat(w http.ResponseWriter, r *http.Request, s *fakeSandbox) {
	p := filePath(r.URL.Query().Get("path"))
	if _, ok := s.lookup(w, p); ok {
		writeFakeJSON(w, http.StatusOK, s.info(p))
	}
}

func (d *fakeDaemon) mkdir(w http.ResponseWriter, r *http.Request, s *fakeSandbox) {
	p := filePath(r.URL.Query().Get("path"))
	if f, ok := s.files[p]; ok && !f.dir {
		writeFakeError(w, sandbox.Errorf(sandbox.CodeAlreadyExists, "%s exists and is not a directory", p))
		return
	}
	s.mkdirAll(p)
	writeFakeJSON(w, http.StatusOK, s.info(p))
}

func (d *fakeDaemon) remove(w http.ResponseWriter, r *http.Request, s *fakeSandbox) {
	q := r.URL.Query()
	p := filePath(q.Get("path"))
	if _, ok := s.lookup(w, p); !ok {
		return
	}
	if kids := s.children(p); len(kids) > 0 {
		if q.Get("recursive") != "true" {
			writeFakeError(w, sandbox.Errorf(sandbox.CodeInvalidArgument, "%s is a non-empty directory", p).WithHint("remove it recursively (hearth fs rm -r)"))
			return
		}
		for f := range s.files {
			if strings.HasPrefix(f, p+"/") {
				delete(s.files, f)
			}
		}
	}
	delete(s.files, p)
	w.WriteHeader(http.StatusNoContent)
}

func (d *fakeDaemon) rename(w http.ResponseWriter, r *http.Request, s *fakeSandbox) {
	q := r.URL.Query()
	from, to := filePath(q.Get("from")), filePath(q.Get("to"))
	f, ok := s.lookup(w, from)
	if !ok {
		return
	}
	if _, ok := s.lookup(w, path.Dir(to)); !ok {
		return
	}
	delete(s.files, from)
	s.files[to] = f
	writeFakeJSON(w, http.StatusOK, s.info(to))
}

func (d *fakeDaemon) chmod(w http.ResponseWriter, r *http.Request, s *fakeSandbox) {
	q := r.URL.Query()
	p := filePath(q.Get("path"))
	f, ok := s.lookup(w, p)
	if !ok {
		return
	}
	mode, err := sandbox.ParseMode(q.Get("mode"))
	if err != nil {
		writeFakeError(w, sandbox.Errorf(sandbox.CodeInvalidArgument, "invalid mode %q", q.Get("mode")))
		return
	}
	f.mode = mode
	writeFakeJSON(w, http.StatusOK, s.info(p))
}

func writeFakeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// writeFakeError answers err as the API does: the status of its code and
// the body {"error":{"code","message","hint","details"}}.
func writeFakeError(w http.ResponseWriter, err error) {
	writeFakeJSON(w, sandbox.ErrorCode(err).HTTPStatus(), map[string]any{"error": wireError(err)})
}

// wireError is err as the API sends it, every key present.
func wireError(err error) sandbox.WireError { return sandbox.AsError(err).Wire() }
