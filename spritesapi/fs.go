package spritesapi

import (
	"io/fs"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/sandbox"
)

// The filesystem API: paths are absolute, or relative to workingDir ("/"
// when absent); keys are camelCase; modes are 4-digit octal strings; an
// error about a file carries the file's errno and path (fsErr). Calls run
// as the sandbox user; asRoot is accepted and has no effect.

// maxListEntries bounds a recursive list.
const maxListEntries = 100_000

// fsPath resolves name against workingDir.
func fsPath(name, workingDir string) (string, error) {
	if name == "" {
		return "", sandbox.Errorf(sandbox.CodeInvalidArgument, "missing path").WithHint("send path=/absolute/path, or a path relative to workingDir")
	}
	if path.IsAbs(name) {
		return path.Clean(name), nil
	}
	if workingDir == "" {
		workingDir = "/"
	}
	return path.Join(workingDir, name), nil
}

// queryPath resolves the path query parameter of r.
func queryPath(r *http.Request) (string, error) {
	q := r.URL.Query()
	return fsPath(q.Get("path"), q.Get("workingDir"))
}

// fsErr marks a file error from the sandbox with the path it is about, so
// that writeError answers it in the filesystem API's shape
// ({"error","code":"ENOENT","path"}); other errors (the sprite's) pass
// unchanged.
func fsErr(p string, err error) error {
	e := sandbox.AsError(err)
	if _, ok := e.Details["errno"].(string); !ok {
		return err
	}
	c := *e
	c.Details = map[string]any{}
	for k, v := range e.Details {
		c.Details[k] = v
	}
	c.Details["path"] = p
	return &c
}

// fsErrorBody is the filesystem API's error body.
type fsErrorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	Path  string `json:"path"`
}

// fsErrorStatus is the status of a file error with errno: 404 only for a
// missing file, which every SDK reads as "not found".
func fsErrorStatus(errno string, status int) int {
	switch errno {
	case "ENOENT":
		return http.StatusNotFound
	case "EEXIST":
		return http.StatusConflict
	case "EACCES", "EPERM", "EROFS":
		return http.StatusForbidden
	case "EISDIR", "ENOTDIR", "EINVAL", "ENOTEMPTY", "ELOOP", "ENAMETOOLONG", "EXDEV":
		return http.StatusBadRequest
	}
	return status
}

// octal renders a mode as Sprites does: four octal digits.
func octal(m fs.FileMode) string { return sandbox.FormatMode(m) }

// handleRead answers the file's bytes. Errors come before any byte.
func (d *server) handleRead(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
	abs, err := queryPath(r)
	if err != nil {
		return err
	}
	out := &lazyBody{w: w}
	if err := d.svc.Files.ReadFile(r.Context(), p, r.PathValue("name"), abs, out); err != nil {
		if out.started {
			panic(http.ErrAbortHandler) // the body is cut short: the client must not take it for whole
		}
		return fsErr(abs, err)
	}
	if !out.started {
		out.start()
	}
	return nil
}

// lazyBody sends 200 and the octet-stream header with its first byte, so
// that an error found before any byte can still be answered.
type lazyBody struct {
	w       http.ResponseWriter
	started bool
}

func (b *lazyBody) start() {
	b.w.Header().Set("Content-Type", "application/octet-stream")
	b.w.WriteHeader(http.StatusOK)
	b.started = true
}

func (b *lazyBody) Write(p []byte) (int, error) {
	if !b.started {
		b.start()
	}
	return b.w.Write(p)
}

// writeResult is the answer of a write.
type writeResult struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	Mode string `json:"mode"`
}

// handleWrite writes the body to the file, replacing it whole. Parents are
// created unless mkdirParents (or mkdir) is false; mode, when given, is
// set on a new or rewritten file, and a file rewritten without one keeps
// its mode. The route is Visible (nothing is read of a write to another's
// sprite); a Content-Length over the daemon's write limit is then refused
// before a byte of the body is read, and a chunked body is cut at the
// limit.
func (d *server) handleWrite(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
	abs, err := queryPath(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	parents := true
	for _, key := range []string{"mkdirParents", "mkdir"} {
		if q.Has(key) {
			if parents, err = boolParam(q, key, true); err != nil {
				return err
			}
		}
	}
	req := sandbox.WriteRequest{Path: abs, Parents: parents, MaxBytes: d.svc.Files.MaxWriteBytes()}
	if s := q.Get("mode"); s != "" {
		if req.Mode, err = sandbox.ParseMode(s); err != nil {
			return err
		}
		req.SetMode = true
	}
	if err := door.WriteTooLarge(r.ContentLength, req.MaxBytes); err != nil {
		return fsErr(abs, sandbox.AsError(err).With("errno", "EFBIG")) // as the agent refuses it
	}
	info, err := d.svc.Files.WriteFile(r.Context(), p, r.PathValue("name"), req, http.MaxBytesReader(w, r.Body, req.MaxBytes+1))
	if err != nil {
		return fsErr(abs, err)
	}
	encode(w, http.StatusOK, writeResult{Path: info.Path, Size: info.Size, Mode: octal(info.Mode)})
	return nil
}

// entry is one file in a list.
type entry struct {
	Name    string `json:"name"`
	Path    string `json:"path"`
	Type    string `json:"type"`
	Size    int64  `json:"size"`
	Mode    string `json:"mode"`
	ModTime string `json:"modTime"`
	IsDir   bool   `json:"isDir"`
}

func entryOf(f sandbox.FileInfo) entry {
	typ := "file"
	switch f.Type {
	case sandbox.FileDir:
		typ = "directory"
	case sandbox.FileSymlink:
		typ = "symlink"
	}
	return entry{Name: f.Name, Path: f.Path, Type: typ, Size: f.Size, Mode: octal(f.Mode),
		ModTime: f.ModTime.UTC().Format(time.RFC3339), IsDir: f.Type == sandbox.FileDir}
}

// listResult is the answer of a list.
type listResult struct {
	Path    string  `json:"path"`
	Count   int     `json:"count"`
	Entries []entry `json:"entries"`
}

// handleListDir lists a directory's children, directories first and then
// by name (the SDKs stat through a list's first entry, which this order
// makes right more often), or describes a file as the one entry. With
// recursive=true it lists every descendant.
func (d *server) handleListDir(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
	abs, err := queryPath(r)
	if err != nil {
		return err
	}
	recursive, err := boolParam(r.URL.Query(), "recursive", false)
	if err != nil {
		return err
	}
	info, err := d.stat(r, p, abs)
	if err != nil {
		return err
	}
	files := []sandbox.FileInfo{info}
	if info.Type == sandbox.FileDir {
		if files, err = d.walk(r, p, info.Path, recursive); err != nil {
			return err
		}
	}
	out := listResult{Path: info.Path, Count: len(files), Entries: make([]entry, len(files))}
	for i, f := range files {
		out.Entries[i] = entryOf(f)
	}
	encode(w, http.StatusOK, out)
	return nil
}

// stat describes the file at abs in r's sprite.
func (d *server) stat(r *http.Request, p sandbox.Principal, abs string) (sandbox.FileInfo, error) {
	info, err := d.svc.Files.Stat(r.Context(), p, r.PathValue("name"), abs)
	if err != nil {
		return sandbox.FileInfo{}, fsErr(abs, err)
	}
	return info, nil
}

// walk returns dir's children, directories first and then by name, and
// with recursive every descendant (breadth first, symlinks not followed).
// More than maxListEntries is too_large.
func (d *server) walk(r *http.Request, p sandbox.Principal, dir string, recursive bool) ([]sandbox.FileInfo, error) {
	var out []sandbox.FileInfo
	for dirs := []string{dir}; len(dirs) > 0; dirs = dirs[1:] {
		children, err := d.svc.Files.ListDir(r.Context(), p, r.PathValue("name"), dirs[0])
		if err != nil {
			return nil, fsErr(dirs[0], err)
		}
		slices.SortFunc(children, func(a, b sandbox.FileInfo) int {
			if ad, bd := a.Type == sandbox.FileDir, b.Type == sandbox.FileDir; ad != bd {
				if ad {
					return -1
				}
				return 1
			}
			return strings.Compare(a.Name, b.Name)
		})
		for _, c := range children {
			out = append(out, c)
			if recursive && c.Type == sandbox.FileDir {
				dirs = append(dirs, c.Path)
			}
		}
		if len(out) > maxListEntries {
			return nil, sandbox.Errorf(sandbox.CodeTooLarge, "%s holds more than %d entries", dir, maxListEntries).
				WithHint("work on a smaller tree, or without recursive").With("limit", maxListEntries)
		}
	}
	return out, nil
}

// pathBody is the JSON body of delete (the docs' form), rename and chmod.
type pathBody struct {
	Path       string `json:"path"`
	Source     string `json:"source"`
	Dest       string `json:"dest"`
	WorkingDir string `json:"workingDir"`
	Recursive  bool   `json:"recursive"`
	Mode       string `json:"mode"`
}

// resolve resolves each of paths, fields of b, against b.WorkingDir.
func (b *pathBody) resolve(paths ...*string) error {
	for _, p := range paths {
		abs, err := fsPath(*p, b.WorkingDir)
		if err != nil {
			return err
		}
		*p = abs
	}
	return nil
}

// handleDeleteFile removes a file, or a directory with recursive=true;
// its parameters come in the query (every SDK) or a JSON body (the docs).
func (d *server) handleDeleteFile(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
	var b pathBody
	q := r.URL.Query()
	if q.Has("path") {
		b.Path, b.WorkingDir = q.Get("path"), q.Get("workingDir")
		var err error
		if b.Recursive, err = boolParam(q, "recursive", false); err != nil {
			return err
		}
	} else if err := decode(w, r, &b); err != nil {
		return err
	}
	if err := b.resolve(&b.Path); err != nil {
		return err
	}
	if err := d.svc.Files.Remove(r.Context(), p, r.PathValue("name"), b.Path, b.Recursive); err != nil {
		return fsErr(b.Path, err)
	}
	encode(w, http.StatusOK, map[string]any{"deleted": []string{b.Path}, "count": 1})
	return nil
}

// handleRename moves source to dest, replacing a file at dest.
func (d *server) handleRename(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
	var b pathBody
	if err := decode(w, r, &b); err != nil {
		return err
	}
	if err := b.resolve(&b.Source, &b.Dest); err != nil {
		return err
	}
	if _, err := d.svc.Files.Rename(r.Context(), p, r.PathValue("name"), b.Source, b.Dest); err != nil {
		return fsErr(b.Source, err)
	}
	encode(w, http.StatusOK, map[string]string{"source": b.Source, "dest": b.Dest})
	return nil
}

// affected is one file chmod changed.
type affected struct {
	Path string `json:"path"`
	Mode string `json:"mode"`
}

// handleChmod sets the mode of a file, or of a directory and everything
// below it with recursive.
func (d *server) handleChmod(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
	var b pathBody
	if err := decode(w, r, &b); err != nil {
		return err
	}
	if err := b.resolve(&b.Path); err != nil {
		return err
	}
	abs := b.Path
	mode, err := sandbox.ParseMode(b.Mode)
	if err != nil {
		return err
	}
	info, err := d.stat(r, p, abs)
	if err != nil {
		return err
	}
	targets := []string{info.Path}
	if b.Recursive && info.Type == sandbox.FileDir {
		below, err := d.walk(r, p, info.Path, true)
		if err != nil {
			return err
		}
		for _, f := range below {
			if f.Type != sandbox.FileSymlink {
				targets = append(targets, f.Path)
			}
		}
	}
	out := []affected{}
	for _, t := range targets {
		info, err := d.svc.Files.Chmod(r.Context(), p, r.PathValue("name"), t, mode)
		if err != nil {
			return fsErr(t, err)
		}
		out = append(out, affected{Path: info.Path, Mode: octal(info.Mode)})
	}
	encode(w, http.StatusOK, map[string]any{"affected": out, "count": len(out)})
	return nil
}
