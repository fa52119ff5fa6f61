package httpapi

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// params decodes one route's query parameters strictly: a parameter the
// route does not take, or one given twice, is invalid_argument, so that a
// typo (?recursve=true) fails loudly instead of being ignored. The first
// error sticks in err; the getters then return zero values.
type params struct {
	q   url.Values
	err error
}

// queryParams parses r's query, allowing only the names in allowed, each
// once; a name written with a trailing "*" ("port*") may repeat.
func queryParams(r *http.Request, allowed ...string) *params {
	p := &params{}
	p.q, p.err = url.ParseQuery(r.URL.RawQuery)
	if p.err != nil {
		p.err = sandbox.Errorf(sandbox.CodeInvalidArgument, "malformed query string: %v", p.err).
			WithHint("escape the values, e.g. with encodeURIComponent or url.QueryEscape")
		return p
	}
	names := make([]string, 0, len(p.q))
	for name := range p.q {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		switch {
		case slices.Contains(allowed, name+"*"):
			continue
		case !slices.Contains(allowed, name):
			p.err = sandbox.Errorf(sandbox.CodeInvalidArgument, "unknown query parameter %q", name).
				WithHint("%s", takes(r, allowed))
		case len(p.q[name]) > 1:
			p.err = sandbox.Errorf(sandbox.CodeInvalidArgument, "query parameter %q is given %d times", name, len(p.q[name])).
				WithHint("give it once")
		default:
			continue
		}
		return p
	}
	return p
}

// takes says which query parameters r's route takes, for a hint.
func takes(r *http.Request, allowed []string) string {
	if len(allowed) == 0 {
		return fmt.Sprintf("%s %s takes no query parameters", r.Method, r.URL.Path)
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = strings.TrimSuffix(a, "*")
	}
	return fmt.Sprintf("%s %s takes: %s", r.Method, r.URL.Path, strings.Join(names, ", "))
}

// fail records err unless an earlier error is already recorded.
func (p *params) fail(err error) {
	if p.err == nil {
		p.err = err
	}
}

// path returns the required, non-empty file path parameter name. Relative
// paths are relative to the sandbox user's home; resolving them is the
// sandbox's business.
func (p *params) path(name string) string {
	v := p.q.Get(name)
	if v == "" && p.err == nil {
		p.fail(sandbox.Errorf(sandbox.CodeInvalidArgument, "missing query parameter %q", name).
			WithHint("add ?%s=<path in the sandbox>, e.g. ?%s=/home/sandbox/notes.txt (relative paths start at the sandbox user's home)", name, name))
	}
	return v
}

// bool returns the optional boolean parameter name (false when absent);
// it accepts what strconv.ParseBool does, and an empty value as true
// (?recursive).
func (p *params) bool(name string) bool {
	if !p.q.Has(name) {
		return false
	}
	v := p.q.Get(name)
	if v == "" {
		return true
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.fail(sandbox.Errorf(sandbox.CodeInvalidArgument, "query parameter %s=%q is not a boolean", name, v).
			WithHint("use %s=true or %s=false", name, name))
	}
	return b
}

// int64 returns the optional non-negative integer parameter name (0 when
// absent).
func (p *params) int64(name string) int64 {
	v := p.q.Get(name)
	if v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if errors.Is(err, strconv.ErrRange) && n > 0 {
		p.fail(sandbox.Errorf(sandbox.CodeInvalidArgument, "query parameter %s=%q is too large: at most %d", name, v, int64(math.MaxInt64)).
			With("max", int64(math.MaxInt64)).WithHint("give a smaller number"))
		return 0
	}
	if err != nil || n < 0 {
		p.fail(sandbox.Errorf(sandbox.CodeInvalidArgument, "query parameter %s=%q is not a non-negative integer", name, v).
			WithHint("give a number of bytes, e.g. %s=1048576", name))
		return 0
	}
	return n
}

// mode returns the optional parameter name as a file mode, and whether it
// was given. The value is octal in the Unix notation ("0755", "755",
// "0o4755"); the setuid, setgid and sticky bits (04000, 02000, 01000)
// become fs.ModeSetuid, fs.ModeSetgid and fs.ModeSticky.
func (p *params) mode(name string) (fs.FileMode, bool) {
	v := p.q.Get(name)
	if !p.q.Has(name) {
		return 0, false
	}
	m, err := sandbox.ParseMode(v)
	if err != nil {
		p.fail(sandbox.Errorf(sandbox.CodeInvalidArgument, "query parameter %s=%q is not an octal file mode", name, v).
			WithHint("use octal permission bits such as %s=0644 or %s=0755 (at most 07777)", name, name))
	}
	return m, true
}

// since returns the optional time parameter name (zero when absent): an
// RFC 3339 time, or a Go duration (24h, 90m) back from now.
func (p *params) since(name string, now time.Time) time.Time {
	v := p.q.Get(name)
	if v == "" {
		return time.Time{}
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t
	}
	d, err := sandbox.ParseDuration(v)
	if err != nil && sandbox.AsError(err).Details["max_seconds"] != nil {
		p.fail(err) // too long
		return time.Time{}
	}
	if err != nil || d < 0 {
		p.fail(sandbox.Errorf(sandbox.CodeInvalidArgument, "query parameter %s=%q is neither a time nor a duration", name, v).
			WithHint("give an RFC 3339 time such as %s=2026-01-02T15:04:05Z, or a duration back from now such as %s=24h", name, name))
		return time.Time{}
	}
	return now.Add(-time.Duration(d))
}
