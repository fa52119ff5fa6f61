package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/hearth/hearth/sandbox"
)

// Paths inside a sandbox are absolute, or relative to the sandbox user's
// home; they travel in the query string, escaped by this package.

// ReadFile streams the file at path in sandbox name to w. Errors the daemon
// finds (not_found, a directory) come before any byte reaches w. A transfer
// that breaks midway is unavailable, and w then holds a prefix of the file;
// an error of w itself is returned as it is.
func (c *Client) ReadFile(ctx context.Context, name, path string, w io.Writer) error {
	p, err := sandboxPath(name, "/fs/file")
	if err != nil {
		return err
	}
	resp, err := c.t.send(ctx, http.MethodGet, p, url.Values{"path": {path}}, nil, nil)
	if err != nil {
		return err
	}
	return copyBody(ctx, resp, w, "read "+path, func(n int64, err error) error {
		return sandbox.Errorf(sandbox.CodeUnavailable, "reading %s from sandbox %s broke after %d bytes: %v", path, name, n, err).
			WithHint("retry; what was written so far is only the start of the file").
			With("bytes_read", n)
	})
}

// copyBody copies resp's body to w and closes it. An error of w itself,
// or ctx's end, is returned wrapped as "hearth: what: …"; a transfer that
// broke after n bytes is broke(n, err).
func copyBody(ctx context.Context, resp *http.Response, w io.Writer, what string, broke func(n int64, err error) error) error {
	defer resp.Body.Close()
	dst := &errWriter{w: w}
	n, err := io.Copy(dst, resp.Body)
	switch {
	case err == nil:
		return nil
	case dst.err != nil:
		return fmt.Errorf("hearth: %s: %w", what, dst.err)
	case ctx.Err() != nil:
		return fmt.Errorf("hearth: %s: %w", what, ctx.Err())
	}
	return broke(n, err)
}

// errWriter remembers its writer's error, to tell it apart from the
// network's.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil {
		e.err = err
	}
	return n, err
}

// errReader remembers its reader's error other than io.EOF.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF {
		e.err = err
	}
	return n, err
}

// expectContinueOver is the body size above which WriteFile asks the daemon
// to approve the request before sending the body (Expect: 100-continue), so
// that a refusal (too_large, not_found) costs no upload.
const expectContinueOver = 1 << 20

// WriteFile writes the content of r to req.Path in sandbox name, atomically:
// the file is replaced only once all of r arrived. When r is a
// *bytes.Reader, *bytes.Buffer, *strings.Reader or a regular *os.File, its
// remaining length is sent as Content-Length, so that content over the
// daemon's limit is refused (too_large, with details max_bytes and size)
// before it is uploaded; other readers are streamed and cut at the limit. A
// nil r writes an empty file.
func (c *Client) WriteFile(ctx context.Context, name string, req sandbox.WriteRequest, r io.Reader) (sandbox.FileInfo, error) {
	var info sandbox.FileInfo
	p, err := sandboxPath(name, "/fs/file")
	if err != nil {
		return info, err
	}
	q := url.Values{"path": {req.Path}}
	if req.Mode != 0 || req.SetMode {
		q.Set("mode", sandbox.FormatMode(req.Mode))
		if !req.SetMode {
			q.Set("set_mode", "false")
		}
	}
	if req.Parents {
		q.Set("parents", "true")
	}
	if req.MaxBytes > 0 {
		q.Set("max_bytes", strconv.FormatInt(req.MaxBytes, 10))
	}

	size := contentLength(r)
	var body io.Reader = http.NoBody
	var src *errReader
	if r != nil && size != 0 {
		if size > 0 {
			// The length is promised: never send more, even if a file grows.
			r = io.LimitReader(r, size)
		}
		src = &errReader{r: r}
		body = src
	}
	resp, err := c.t.send(ctx, http.MethodPut, p, q, body, func(hr *http.Request) {
		hr.Header.Set("Content-Type", "application/octet-stream")
		hr.ContentLength = max(size, 0)
		if size < 0 || size > expectContinueOver {
			hr.Header.Set("Expect", "100-continue")
		}
	})
	if src != nil && src.err != nil {
		if resp != nil {
			resp.Body.Close()
		}
		return info, fmt.Errorf("hearth: write %s: reading the content: %w", req.Path, src.err)
	}
	if err != nil {
		return info, err
	}
	defer resp.Body.Close()
	return info, c.t.decodeBody(ctx, http.MethodPut, p, resp, &info)
}

// contentLength is the number of bytes left in r when its type tells, 0 for
// nil, and -1 when unknown.
func contentLength(r io.Reader) int64 {
	switch v := r.(type) {
	case nil:
		return 0
	case *bytes.Reader:
		return int64(v.Len())
	case *bytes.Buffer:
		return int64(v.Len())
	case *strings.Reader:
		return int64(v.Len())
	case *os.File:
		fi, err := v.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			return -1
		}
		off, err := v.Seek(0, io.SeekCurrent)
		if err != nil || off > fi.Size() {
			return -1
		}
		return fi.Size() - off
	}
	return -1
}

// ListDir lists the directory at path in sandbox name.
func (c *Client) ListDir(ctx context.Context, name, path string) ([]sandbox.FileInfo, error) {
	var out struct {
		Entries []sandbox.FileInfo `json:"entries"`
	}
	err := c.t.fileOp(ctx, http.MethodGet, name, "/fs/list", url.Values{"path": {path}}, &out)
	return out.Entries, err
}

// Stat describes the file at path in sandbox name, without following a
// final symlink.
func (c *Client) Stat(ctx context.Context, name, path string) (sandbox.FileInfo, error) {
	var info sandbox.FileInfo
	err := c.t.fileOp(ctx, http.MethodGet, name, "/fs/stat", url.Values{"path": {path}}, &info)
	return info, err
}

// Mkdir creates the directory at path and its missing parents (mkdir -p).
func (c *Client) Mkdir(ctx context.Context, name, path string) (sandbox.FileInfo, error) {
	var info sandbox.FileInfo
	err := c.t.fileOp(ctx, http.MethodPost, name, "/fs/mkdir", url.Values{"path": {path}}, &info)
	return info, err
}

// Remove deletes the file at path; a non-empty directory needs recursive.
func (c *Client) Remove(ctx context.Context, name, path string, recursive bool) error {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "true")
	}
	return c.t.fileOp(ctx, http.MethodDelete, name, "/fs/file", q, nil)
}

// Rename moves from to to inside sandbox name and describes the result.
func (c *Client) Rename(ctx context.Context, name, from, to string) (sandbox.FileInfo, error) {
	var info sandbox.FileInfo
	err := c.t.fileOp(ctx, http.MethodPost, name, "/fs/rename", url.Values{"from": {from}, "to": {to}}, &info)
	return info, err
}

// Chmod sets the permission bits (and setuid, setgid, sticky) of the file
// at path.
func (c *Client) Chmod(ctx context.Context, name, path string, mode fs.FileMode) (sandbox.FileInfo, error) {
	var info sandbox.FileInfo
	err := c.t.fileOp(ctx, http.MethodPost, name, "/fs/chmod", url.Values{"path": {path}, "mode": {sandbox.FormatMode(mode)}}, &info)
	return info, err
}

// fileOp sends a body-less request to a file endpoint of sandbox name and
// decodes the JSON answer into out (nil for none).
func (t *transport) fileOp(ctx context.Context, method, name, suffix string, q url.Values, out any) error {
	p, err := sandboxPath(name, suffix)
	if err != nil {
		return err
	}
	_, err = t.doJSON(ctx, method, p, q, nil, out)
	return err
}
