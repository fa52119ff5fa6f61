// Package client is the Go SDK of hearth's native API (docs/API.md): the
// CLI talks to the daemon through it, and so can any Go program.
//
// Every error the daemon sends comes back as a *sandbox.Error (use
// errors.As, or sandbox.IsCode and sandbox.ErrorCode), with the code,
// message, hint and details the daemon rendered; a response without an
// error body is mapped from its HTTP status (sandbox.CodeForHTTPStatus). A
// daemon that cannot be reached is CodeUnavailable, with a hint naming the
// URL. When the caller's context ends, the context's error is returned
// (wrapped, for errors.Is). Failures of the caller's own readers and writers
// (stdin, stdout, a file's content) are returned as they are, wrapped with
// what was being done.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// Options configure a Client. The zero value, and nil, work.
type Options struct {
	// HTTPClient sends the requests; nil means a client over
	// http.DefaultTransport. Its Timeout, when set, also bounds file
	// transfers (but only the handshake of an exec): prefer contexts.
	HTTPClient *http.Client
	// UserAgent is the User-Agent header; empty means "hearth-go-client".
	UserAgent string
}

// Client calls one hearth daemon with one token: its methods are the
// sandbox calls, Admin's the tenancy, credential and audit calls, and
// Images' the image calls. It is safe for concurrent use.
type Client struct {
	t      *transport
	admin  *Admin
	images *Images
}

// Admin calls the parts of the API that manage tenants, agents, tokens,
// secrets, bindings and the audit log, with its Client's daemon and token:
// what operators and tenant admins call. It is safe for concurrent use.
type Admin struct {
	t *transport
}

// Admin returns the tenancy, credential and audit calls of c.
func (c *Client) Admin() *Admin { return c.admin }

// transport sends the requests of a Client and its Admin.
type transport struct {
	base    string // scheme://host[/prefix], no trailing slash
	baseErr error  // why baseURL is unusable, returned by every call
	token   string
	hc      *http.Client
	ua      string
}

// New returns a client for the daemon at baseURL ("http://127.0.0.1:7070",
// or with a path prefix when a proxy mounts the API under one; a URL without
// a scheme is taken as http). An unusable URL is reported, as
// invalid_argument, by every call.
func New(baseURL, token string, opts *Options) *Client {
	var o Options
	if opts != nil {
		o = *opts
	}
	t := &transport{token: token, hc: o.HTTPClient, ua: o.UserAgent}
	if t.hc == nil {
		t.hc = &http.Client{}
	}
	if t.ua == "" {
		t.ua = "hearth-go-client"
	}
	t.base, t.baseErr = parseBase(baseURL)
	return &Client{t: t, admin: &Admin{t: t}, images: &Images{t: t}}
}

// parseBase checks and normalizes the daemon URL.
func parseBase(raw string) (string, error) {
	s := strings.TrimSpace(raw)
	if s != "" && !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", sandbox.Errorf(sandbox.CodeInvalidArgument, "invalid hearth URL %q", raw).
			WithHint("use http://HOST:PORT or https://HOST[:PORT], e.g. http://127.0.0.1:7070")
	}
	u.RawQuery, u.Fragment = "", ""
	return strings.TrimRight(u.String(), "/"), nil
}

// Health is the answer of GET /v1/health.
type Health struct {
	// Status is "ok" when the daemon serves requests.
	Status string `json:"status"`
	// Runtime names the runtime that isolates the daemon's sandboxes.
	Runtime string `json:"runtime"`
	// Cluster is the store and its nodes, told to an operator's token
	// only.
	Cluster *sandbox.ClusterHealth `json:"cluster,omitempty"`
}

// Health asks whether the daemon is up; it needs no valid token, and with
// an operator's it also tells the store and its nodes.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	_, err := c.t.doJSON(ctx, http.MethodGet, "/v1/health", nil, nil, &h)
	return h, err
}

// Create makes a sandbox, or returns the caller's existing sandbox of the
// same name with created false (create is idempotent by name). Zero fields
// of req take the daemon's defaults.
func (c *Client) Create(ctx context.Context, req sandbox.CreateRequest) (sb sandbox.Sandbox, created bool, err error) {
	status, err := c.t.doJSON(ctx, http.MethodPost, "/v1/sandboxes", nil, req, &sb)
	return sb, status == http.StatusCreated, err
}

// Get returns the sandbox called name; not_found when the caller may not
// see it.
func (c *Client) Get(ctx context.Context, name string) (sandbox.Sandbox, error) {
	var sb sandbox.Sandbox
	p, err := sandboxPath(name, "")
	if err != nil {
		return sb, err
	}
	_, err = c.t.doJSON(ctx, http.MethodGet, p, nil, nil, &sb)
	return sb, err
}

// List returns the sandboxes the caller may see, oldest first.
func (c *Client) List(ctx context.Context) ([]sandbox.Sandbox, error) {
	var out struct {
		Sandboxes []sandbox.Sandbox `json:"sandboxes"`
	}
	_, err := c.t.doJSON(ctx, http.MethodGet, "/v1/sandboxes", nil, nil, &out)
	return out.Sandboxes, err
}

// Pool returns the warm pool's state per size preset (operators only).
func (c *Client) Pool(ctx context.Context) ([]sandbox.PoolSize, error) {
	var out struct {
		Sizes []sandbox.PoolSize `json:"sizes"`
	}
	_, err := c.t.doJSON(ctx, http.MethodGet, "/v1/pool", nil, nil, &out)
	return out.Sizes, err
}

// Destroy stops the sandbox and releases everything it holds.
func (c *Client) Destroy(ctx context.Context, name string) error {
	p, err := sandboxPath(name, "")
	if err != nil {
		return err
	}
	_, err = c.t.doJSON(ctx, http.MethodDelete, p, nil, nil, nil)
	return err
}

// sandboxPath is the API path of sandbox name plus suffix. name is a
// sandbox reference: NAME, or TENANT/NAME (an operator's way to a tenant's
// sandbox; docs/API.md). It is escaped as one path segment, its '/' as
// %2F; "", "." and ".." cannot be one, and are refused here (the daemon
// validates references).
func sandboxPath(name, suffix string) (string, error) {
	switch name {
	case "", ".", "..":
		return "", sandbox.Errorf(sandbox.CodeInvalidArgument, "invalid sandbox name %q", name).
			WithHint("`hearth list` shows your sandboxes")
	}
	return "/v1/sandboxes/" + url.PathEscape(name) + suffix, nil
}

// doJSON sends a request with in as its JSON body (none when nil) and
// decodes a successful answer into out (ignored when nil). It returns the
// HTTP status.
func (t *transport) doJSON(ctx context.Context, method, path string, query url.Values, in, out any) (int, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, fmt.Errorf("hearth: encode %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	resp, err := t.send(ctx, method, path, query, body, func(r *http.Request) {
		if in != nil {
			r.Header.Set("Content-Type", "application/json")
		}
	})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, t.decodeBody(ctx, method, path, resp, out)
}

// decodeBody decodes the JSON body of a successful answer into out; nil
// out ignores the body.
func (t *transport) decodeBody(ctx context.Context, method, path string, resp *http.Response, out any) error {
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("hearth: %s %s: %w", method, path, ctx.Err())
		}
		return sandbox.Errorf(sandbox.CodeUnavailable, "unexpected answer to %s %s from %s: %v", method, path, t.base, err).
			WithHint("check that the URL points at a hearth daemon (--url or HEARTH_URL)")
	}
	return nil
}

// send sends one request and returns a 2xx response, whose body the caller
// closes; any other answer becomes its *sandbox.Error. edit, when not nil,
// adjusts the request before it is sent.
func (t *transport) send(ctx context.Context, method, path string, query url.Values, body io.Reader, edit func(*http.Request)) (*http.Response, error) {
	if t.baseErr != nil {
		return nil, t.baseErr
	}
	target := t.base + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.CodeInvalidArgument, "cannot build %s %s: %v", method, path, err)
	}
	t.setHeaders(req.Header)
	if edit != nil {
		edit(req)
	}
	resp, err := t.hc.Do(req)
	if err != nil {
		return nil, t.unreachable(ctx, method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, responseError(method, path, resp)
	}
	return resp, nil
}

// setHeaders sets the headers every request carries.
func (t *transport) setHeaders(h http.Header) {
	if t.token != "" {
		h.Set("Authorization", "Bearer "+t.token)
	}
	h.Set("User-Agent", t.ua)
	h.Set("Accept", "application/json")
}

// unreachable turns a failure to get an answer into the caller's context
// error, or unavailable naming the URL.
func (t *transport) unreachable(ctx context.Context, method, path string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("hearth: %s %s: %w", method, path, ctx.Err())
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return sandbox.Errorf(sandbox.CodeUnavailable, "cannot reach hearth at %s: %v", t.base, err).
		WithHint("is `hearth serve` running? check the URL (--url or HEARTH_URL) and the network")
}

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 1 << 20

// responseError decodes the error body of a non-2xx answer. A response
// without one (a proxy's 502, say) is mapped from its status; a code this
// client does not know keeps its message but is mapped from the status too.
func responseError(method, path string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if e, ok := sandbox.ParseErrorBody(b); ok {
		return knownCode(e, resp.StatusCode)
	}
	return sandbox.Errorf(sandbox.CodeForHTTPStatus(resp.StatusCode), "%s %s: the server answered %s", method, path, resp.Status).
		WithHint("the answer carried no hearth error; a proxy between you and the daemon may have sent it").
		With("status", resp.StatusCode)
}

// knownCode returns e with a code this client knows: a code it does not
// know is kept in the detail server_code, and e's code becomes that of
// the HTTP status.
func knownCode(e *sandbox.Error, status int) *sandbox.Error {
	if !e.Code.Valid() {
		e.With("server_code", string(e.Code))
		e.Code = sandbox.CodeForHTTPStatus(status)
	}
	return e
}

// Update applies u to the sandbox called name (its labels) and returns the
// sandbox as it now is.
func (c *Client) Update(ctx context.Context, name string, u sandbox.SandboxUpdate) (sandbox.Sandbox, error) {
	var sb sandbox.Sandbox
	p, err := sandboxPath(name, "")
	if err != nil {
		return sb, err
	}
	_, err = c.t.doJSON(ctx, http.MethodPatch, p, nil, u, &sb)
	return sb, err
}

// Ports returns the ports of the sandbox called name that processes
// listen on, and the ports asked for, each with its URL, by port.
func (c *Client) Ports(ctx context.Context, name string, ports ...int) ([]sandbox.PortInfo, error) {
	p, err := sandboxPath(name, "/ports")
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	for _, port := range ports {
		q.Add("port", strconv.Itoa(port))
	}
	var out struct {
		Ports []sandbox.PortInfo `json:"ports"`
	}
	_, err = c.t.doJSON(ctx, http.MethodGet, p, q, nil, &out)
	return out.Ports, err
}

// Usage returns what sandbox name uses now; with since not zero, also the
// samples its node kept since then (an hour at most), oldest first.
func (c *Client) Usage(ctx context.Context, name string, since time.Time) (sandbox.Usage, error) {
	var u sandbox.Usage
	p, err := sandboxPath(name, "/usage")
	if err != nil {
		return u, err
	}
	if !since.IsZero() {
		p += "?since=" + url.QueryEscape(since.UTC().Format(time.RFC3339Nano))
	}
	_, err = c.t.doJSON(ctx, http.MethodGet, p, nil, nil, &u)
	return u, err
}

// Gone returns why the sandboxes the caller could see went (destroyed,
// reaped, a create undone), the newest first, for as long as the daemon
// keeps the records (7 days by default).
func (c *Client) Gone(ctx context.Context) ([]sandbox.Gone, error) {
	var out struct {
		Gone []sandbox.Gone `json:"gone"`
	}
	_, err := c.t.doJSON(ctx, http.MethodGet, "/v1/gone", nil, nil, &out)
	return out.Gone, err
}
