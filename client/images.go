package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"

	"github.com/hearth/hearth/sandbox"
)

// Images calls the parts of the API that keep the caller's tenant's images
// (docs/API.md, "Images"), with its Client's daemon and token. It is safe
// for concurrent use.
type Images struct {
	t *transport
}

// Images returns the image calls of c.
func (c *Client) Images() *Images { return c.images }

// Progress receives the progress events of a pull, an import or a build,
// in order, on the calling goroutine.
type Progress func(sandbox.ImageProgress)

// PullOptions adjust a pull. The zero value works.
type PullOptions struct {
	// Insecure lets the daemon speak to the reference's registry over
	// plain HTTP or without verifying its certificate, for this pull.
	Insecure bool
	// Progress, if set, receives the pull's progress events.
	Progress Progress
}

// ndjson is the media type of the daemon's progress streams.
const ndjson = "application/x-ndjson"

// Pull pulls ref ("127.0.0.1:5000/app:1.0") from its registry into the
// caller's tenant's images and returns the image as stored, named by its
// normalized reference.
func (im *Images) Pull(ctx context.Context, ref string, opts PullOptions) (sandbox.Image, error) {
	in := struct {
		Ref      string `json:"ref"`
		Insecure bool   `json:"insecure,omitempty"`
	}{ref, opts.Insecure}
	b, err := json.Marshal(in)
	if err != nil {
		return sandbox.Image{}, fmt.Errorf("hearth: encode pull: %w", err)
	}
	return im.t.imageCall(ctx, "/v1/images/pull", nil, jsonBody(b), opts.Progress)
}

// Import stores the image in the archive r (a docker-archive, as `docker
// save` writes it, or an OCI archive) as the caller's tenant's image
// name. r is streamed, never held in memory; when its length is known
// (see WriteFile) the daemon may refuse the call before it is uploaded.
// A failure of r itself is returned as it is, wrapped.
func (im *Images) Import(ctx context.Context, name string, r io.Reader, progress Progress) (sandbox.Image, error) {
	src := &errReader{r: r}
	body := requestBody{r: src, contentType: "application/x-tar", size: contentLength(r)}
	img, err := im.t.imageCall(ctx, "/v1/images/import", url.Values{"name": {name}}, body, progress)
	if src.err != nil {
		return img, fmt.Errorf("hearth: import %s: reading the archive: %w", name, src.err)
	}
	return img, err
}

// BuildOptions adjust a build. The zero value works.
type BuildOptions struct {
	// Args are the build's arguments (--build-arg), which override the
	// Dockerfile's ARG defaults.
	Args map[string]string
	// Network is the network mode of the sandboxes the build's RUN steps
	// run in ("none" or "egress"; "": the tenant's default).
	Network string
	// Progress, if set, receives the build's progress events.
	Progress Progress
}

// Build builds the image name from the Dockerfile dockerfile, whose
// COPY and ADD read from buildContext, a tar archive of the build's
// context directory (the daemon applies its .dockerignore). They are
// streamed to the daemon as the parts "dockerfile", "build_args" (a JSON
// object, when there are any) and "context" of a multipart/form-data body
// (docs/API.md, "Build"). A failure of either reader is returned as it
// is, wrapped.
func (im *Images) Build(ctx context.Context, name string, dockerfile, buildContext io.Reader, opts BuildOptions) (sandbox.Image, error) {
	var args io.Reader
	if len(opts.Args) > 0 {
		b, err := json.Marshal(opts.Args)
		if err != nil {
			return sandbox.Image{}, fmt.Errorf("hearth: encode build arguments: %w", err)
		}
		args = bytes.NewReader(b)
	}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	wrote := make(chan error, 1)
	go func() {
		err := writeParts(mw, dockerfile, args, buildContext)
		pw.CloseWithError(err)
		wrote <- err
	}()
	body := requestBody{r: pr, contentType: mime.FormatMediaType("multipart/form-data", map[string]string{"boundary": mw.Boundary()}), size: -1}
	q := url.Values{"name": {name}}
	if opts.Network != "" {
		q.Set("network", opts.Network)
	}
	img, err := im.t.imageCall(ctx, "/v1/images/build", q, body, opts.Progress)
	pr.CloseWithError(io.ErrClosedPipe) // stops the writer if the daemon answered before reading it all
	if readErr := <-wrote; err != nil && readErr != nil && !errors.Is(readErr, io.ErrClosedPipe) {
		return img, fmt.Errorf("hearth: build %s: %w", name, readErr)
	}
	return img, err
}

// writeParts writes the parts of a build's body to mw and closes it;
// args, when nil, is left out.
func writeParts(mw *multipart.Writer, dockerfile, args, buildContext io.Reader) error {
	for _, part := range []struct {
		name, file, contentType string
		r                       io.Reader
	}{
		{"dockerfile", "Dockerfile", "text/plain", dockerfile},
		{"build_args", "build_args.json", "application/json", args},
		{"context", "context.tar", "application/x-tar", buildContext},
	} {
		if part.r == nil {
			continue
		}
		h := make(map[string][]string)
		h["Content-Disposition"] = []string{fmt.Sprintf(`form-data; name=%q; filename=%q`, part.name, part.file)}
		h["Content-Type"] = []string{part.contentType}
		w, err := mw.CreatePart(h)
		if err != nil {
			return err
		}
		src := &errReader{r: part.r}
		if _, err := io.Copy(w, src); err != nil {
			if src.err != nil {
				return fmt.Errorf("reading the %s: %w", part.name, src.err)
			}
			return err
		}
	}
	return mw.Close()
}

// Export writes the image name, its current version, to w as an OCI
// archive. Errors the daemon finds (not_found) come before any byte
// reaches w; a transfer that breaks midway is unavailable, and w then
// holds a truncated archive. An error of w itself is returned as it is.
func (im *Images) Export(ctx context.Context, name string, w io.Writer) error {
	resp, err := im.t.send(ctx, http.MethodGet, "/v1/image/export", url.Values{"name": {name}}, nil, nil)
	if err != nil {
		return err
	}
	return copyBody(ctx, resp, w, "export "+name, func(n int64, err error) error {
		return sandbox.Errorf(sandbox.CodeUnavailable, "exporting image %s broke after %d bytes: %v", name, n, err).
			WithHint("retry; what was written so far is not a whole archive").With("bytes_read", n)
	})
}

// Create makes the image name from the disk of the caller's sandbox
// sandboxName: from its checkpoint checkpoint, or, when that is "", from
// its disk as it is now.
func (im *Images) Create(ctx context.Context, name, sandboxName, checkpoint string) (sandbox.Image, error) {
	in := struct {
		Name       string `json:"name"`
		From       string `json:"from"`
		Checkpoint string `json:"checkpoint,omitempty"`
	}{name, sandboxName, checkpoint}
	var out sandbox.Image
	_, err := im.t.doJSON(ctx, http.MethodPost, "/v1/images", nil, in, &out)
	return out, err
}

// List returns the images the caller sees: every version of its
// tenant's, then the public ones of other tenants.
func (im *Images) List(ctx context.Context) ([]sandbox.Image, error) {
	var out struct {
		Images []sandbox.Image `json:"images"`
	}
	_, err := im.t.doJSON(ctx, http.MethodGet, "/v1/images", nil, nil, &out)
	return out.Images, err
}

// Get returns the current version of the image name.
func (im *Images) Get(ctx context.Context, name string) (sandbox.Image, error) {
	var out sandbox.Image
	_, err := im.t.doJSON(ctx, http.MethodGet, "/v1/image", url.Values{"name": {name}}, nil, &out)
	return out, err
}

// Remove removes every version of the caller's tenant's image name
// (tenant admins); failed_precondition while a sandbox uses one.
func (im *Images) Remove(ctx context.Context, name string) error {
	_, err := im.t.doJSON(ctx, http.MethodDelete, "/v1/image", url.Values{"name": {name}}, nil, nil)
	return err
}

// SetPublic makes the image name public to every tenant, or private
// again (operators only).
func (im *Images) SetPublic(ctx context.Context, name string, public bool) (sandbox.Image, error) {
	in := struct {
		Public bool `json:"public"`
	}{public}
	var out sandbox.Image
	_, err := im.t.doJSON(ctx, http.MethodPost, "/v1/image/public", url.Values{"name": {name}}, in, &out)
	return out, err
}

// RegistryLogin stores the caller's tenant's credentials for the registry
// login.Host (tenant admins), replacing any, and returns them as stored:
// never the password, which the daemon keeps sealed. login.Tenant and the
// times are the daemon's.
func (a *Admin) RegistryLogin(ctx context.Context, login sandbox.RegistryLogin, password string) (sandbox.RegistryLogin, error) {
	in := struct {
		Username string `json:"username"`
		Password string `json:"password"`
		CA       string `json:"ca,omitempty"`
		Insecure bool   `json:"insecure,omitempty"`
	}{login.Username, password, login.CA, login.Insecure}
	var out sandbox.RegistryLogin
	_, err := a.t.doJSON(ctx, http.MethodPut, "/v1/registries/"+url.PathEscape(login.Host), nil, in, &out)
	return out, err
}

// RegistryLogins lists the caller's tenant's registry logins.
func (a *Admin) RegistryLogins(ctx context.Context) ([]sandbox.RegistryLogin, error) {
	var out struct {
		Registries []sandbox.RegistryLogin `json:"registries"`
	}
	_, err := a.t.doJSON(ctx, http.MethodGet, "/v1/registries", nil, nil, &out)
	return out.Registries, err
}

// RegistryLogout removes the caller's tenant's login for host (tenant
// admins).
func (a *Admin) RegistryLogout(ctx context.Context, host string) error {
	_, err := a.t.doJSON(ctx, http.MethodDelete, "/v1/registries/"+url.PathEscape(host), nil, nil, nil)
	return err
}

// requestBody is a request's body, its media type and its length (-1:
// unknown, sent chunked).
type requestBody struct {
	r           io.Reader
	contentType string
	size        int64
}

func jsonBody(b []byte) requestBody {
	return requestBody{r: bytes.NewReader(b), contentType: "application/json", size: int64(len(b))}
}

// imageCall POSTs body to path and returns the image the daemon answers.
// With progress it asks for the progress stream (Accept:
// application/x-ndjson) and hands progress each event of it. A body that
// is large or of unknown length waits for the daemon's approval (Expect:
// 100-continue), so that a refusal costs no upload.
func (t *transport) imageCall(ctx context.Context, path string, q url.Values, body requestBody, progress Progress) (sandbox.Image, error) {
	const method = http.MethodPost
	r := body.r
	if body.size > 0 {
		r = io.LimitReader(r, body.size) // the length is promised: never send more
	}
	resp, err := t.send(ctx, method, path, q, r, func(hr *http.Request) {
		hr.Header.Set("Content-Type", body.contentType)
		if body.size >= 0 {
			hr.ContentLength = body.size
		}
		if body.size < 0 || body.size > expectContinueOver {
			hr.Header.Set("Expect", "100-continue")
		}
		if progress != nil {
			hr.Header.Set("Accept", ndjson)
		}
	})
	if err != nil {
		return sandbox.Image{}, err
	}
	defer resp.Body.Close()
	var img sandbox.Image
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != ndjson {
		return img, t.decodeBody(ctx, method, path, resp, &img)
	}
	return t.readProgress(ctx, method+" "+path, resp.Body, progress)
}

// readProgress reads a progress stream (docs/API.md, "Progress streams")
// up to its last line, the image or the error, handing progress (if not
// nil) each event before it. A stream that ends without its last line is
// unavailable: the daemon went away, and whether the image was stored is
// for `hearth image list` to tell.
func (t *transport) readProgress(ctx context.Context, call string, body io.Reader, progress Progress) (sandbox.Image, error) {
	dec := json.NewDecoder(body)
	for {
		var line struct {
			sandbox.ImageProgress
			Image *sandbox.Image `json:"image"`
			Error *sandbox.Error `json:"error"`
		}
		err := dec.Decode(&line)
		switch {
		case err != nil && ctx.Err() != nil:
			return sandbox.Image{}, fmt.Errorf("hearth: %s: %w", call, ctx.Err())
		case err != nil:
			return sandbox.Image{}, sandbox.Errorf(sandbox.CodeUnavailable, "the progress stream of %s from %s ended before its result: %v", call, t.base, err).
				WithHint("the daemon may have stopped; `hearth image list` shows whether the image was stored")
		case line.Error != nil:
			return sandbox.Image{}, knownCode(line.Error, http.StatusInternalServerError)
		case line.Image != nil:
			return *line.Image, nil
		case progress != nil:
			progress(line.ImageProgress)
		}
	}
}
