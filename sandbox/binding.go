package sandbox

import (
	"bytes"
	"net/netip"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// GatewayDomain is the domain under which a sandbox reaches its tenant's
// bindings: the binding NAME is the host NAME.hearth.internal, which the
// daemon's egress gateway answers on the sandbox's own link.
const GatewayDomain = "hearth.internal"

// A binding's defaults and limits.
const (
	// DefaultBindingHeader is the header a binding sets when it names none.
	DefaultBindingHeader = "Authorization"
	// DefaultBindingFormat is the header value a binding sends when it
	// names none.
	DefaultBindingFormat = "Bearer " + SecretPlaceholder
	// SecretPlaceholder marks, once, where a binding's Format takes the
	// secret's value.
	SecretPlaceholder = "{secret}"
	// MaxUpstreamLen and MaxFormatLen bound a binding's Upstream and
	// Format in bytes.
	MaxUpstreamLen = 2048
	MaxFormatLen   = 1024
)

// Binding is a credential binding: it lets a tenant's sandboxes call an
// upstream HTTP(S) API with one of the tenant's secrets without ever
// seeing the value. A sandbox in network mode egress sends plain HTTP to
// http://NAME.hearth.internal/PATH (see BindingHost); the daemon's egress
// gateway forwards it to Upstream joined with PATH, with the header Header
// set to Format with the secret's value in place of "{secret}" (see
// HeaderValue). The binding names the secret; it never holds its value.
type Binding struct {
	// Tenant owns the binding and the secret it names.
	Tenant string `json:"tenant"`
	// Name is a DNS label (see ValidateBindingName): the binding's host
	// is Name.hearth.internal.
	Name string `json:"name"`
	// Secret is the name of the tenant's secret whose value goes out.
	Secret string `json:"secret"`
	// Upstream is the absolute http or https URL requests go to, with an
	// optional path prefix, as NormalizeUpstream returns it.
	Upstream string `json:"upstream"`
	// Header is the header field the gateway sets (replacing any the
	// sandbox sent), in canonical form: "Authorization" by default.
	Header string `json:"header"`
	// Format is Header's value, with "{secret}" exactly once where the
	// value goes: "Bearer {secret}" by default.
	Format    string    `json:"format"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// NormalizeBinding checks b's Name, Secret, Upstream, Header and Format
// and returns b as it is stored: an empty Header or Format set to its
// default, Header in canonical form and Upstream normalized (see
// NormalizeUpstream). Tenant and the times are left as they are. The error
// is invalid_argument and names the first rule that failed.
func NormalizeBinding(b Binding) (Binding, error) {
	if err := ValidateBindingName(b.Name); err != nil {
		return b, err
	}
	if err := ValidateSecretName(b.Secret); err != nil {
		return b, err
	}
	up, err := NormalizeUpstream(b.Upstream)
	if err != nil {
		return b, err
	}
	b.Upstream = up
	if b.Header == "" {
		b.Header = DefaultBindingHeader
	}
	if err := ValidateBindingHeader(b.Header); err != nil {
		return b, err
	}
	b.Header = textproto.CanonicalMIMEHeaderKey(b.Header)
	if b.Format == "" {
		b.Format = DefaultBindingFormat
	}
	if err := ValidateBindingFormat(b.Format); err != nil {
		return b, err
	}
	return b, nil
}

// ValidateBindingName checks a binding's name, which becomes the host
// name.hearth.internal: a DNS label of 1–63 lowercase letters, digits and
// '-', not starting or ending with '-'.
func ValidateBindingName(name string) error { return validateLabel("binding name", name, "openai") }

// NormalizeUpstream checks a binding's upstream and returns it normalized:
// an absolute URL whose scheme is http or https, whose host is a DNS name
// or an IP literal (not under GatewayDomain: that would loop) with an
// optional port from 1 to 65535, and whose path, if any, is the prefix
// requests are joined to; no user info, query or fragment. The result is
// the URL's String with scheme and host in lowercase and nothing added or
// removed: in particular no trailing slash beyond the path given
// ("https://api.example.com" stays without one, ".../v1/" keeps its own).
func NormalizeUpstream(raw string) (string, error) {
	bad := func(why string) *Error {
		return Errorf(CodeInvalidArgument, "invalid upstream %q: %s", raw, why).
			WithHint("use an http or https URL with a host and an optional path prefix, e.g. %q", "https://api.openai.com/v1")
	}
	if raw == "" {
		return "", bad("empty")
	}
	if len(raw) > MaxUpstreamLen {
		return "", bad("longer than 2048 bytes").With("limit", MaxUpstreamLen).With("used", len(raw))
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "", bad("not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		if u.Scheme == "" {
			return "", bad("not absolute: no scheme")
		}
		return "", bad("scheme " + strconv.Quote(u.Scheme) + " is not http or https")
	case u.Opaque != "" || u.Host == "":
		return "", bad("no host")
	case u.User != nil:
		return "", bad("user info is not allowed (the secret goes in a header)")
	case u.RawQuery != "" || u.ForceQuery:
		return "", bad("a query is not allowed")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return "", bad("a fragment is not allowed")
	}
	host, why := upstreamHost(u.Hostname())
	if why != "" {
		return "", bad(why)
	}
	if strings.HasSuffix(u.Host, ":") {
		return "", bad("empty port")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", bad("port " + p + " is not between 1 and 65535")
		}
		host += ":" + p
	}
	norm := url.URL{Scheme: u.Scheme, Host: host, Path: u.Path, RawPath: u.RawPath}
	return norm.String(), nil
}

// upstreamHost checks an upstream's host name and returns it in lowercase,
// an IPv6 literal in brackets, or why it is refused.
func upstreamHost(h string) (host, why string) {
	if h == "" {
		return "", "no host"
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		switch {
		case ip.Zone() != "":
			return "", "an IPv6 zone is not allowed"
		case ip.Is6():
			return "[" + ip.String() + "]", ""
		}
		return ip.String(), ""
	}
	h = strings.ToLower(h)
	if len(h) > 253 {
		return "", "host name longer than 253 characters"
	}
	if h == GatewayDomain || strings.HasSuffix(h, "."+GatewayDomain) {
		return "", "host " + strconv.Quote(h) + " is under the gateway's own domain"
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' ||
			strings.IndexFunc(label, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') }) >= 0 {
			return "", "host " + strconv.Quote(h) + " is not a DNS name (labels of letters, digits and '-'; punycode for others) or an IP address"
		}
	}
	return h, ""
}

// ValidateBindingHeader checks the header a binding sets: a field name of
// RFC 9110 token characters ("!#$%&'*+-.^_`|~", letters and digits) that
// is not one HTTP itself manages, which the gateway must control: Host,
// Content-Length, Transfer-Encoding, TE, Trailer, Connection, Keep-Alive,
// Upgrade and every Proxy-* header.
func ValidateBindingHeader(h string) error {
	bad := func(why string) *Error {
		return Errorf(CodeInvalidArgument, "invalid binding header %q: %s", h, why).
			WithHint("use a header field name such as %q or %q", DefaultBindingHeader, "X-Api-Key")
	}
	if h == "" {
		return bad("empty")
	}
	if len(h) > 256 {
		return bad("longer than 256 characters").With("limit", 256).With("used", len(h))
	}
	for i := 0; i < len(h); i++ {
		if !isTokenChar(h[i]) {
			return bad("character " + strconv.QuoteRune(rune(h[i])) + " is not allowed in a header name")
		}
	}
	canon := textproto.CanonicalMIMEHeaderKey(h)
	switch canon {
	case "Host", "Content-Length", "Transfer-Encoding", "Te", "Trailer", "Connection", "Keep-Alive", "Upgrade":
		return bad("HTTP itself manages it")
	}
	if strings.HasPrefix(canon, "Proxy-") {
		return bad("Proxy-* headers are for the hop to a proxy")
	}
	return nil
}

// isTokenChar reports whether c may appear in an RFC 9110 token.
func isTokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// ValidateBindingFormat checks a binding's header value format: at most
// MaxFormatLen bytes holding "{secret}" exactly once, and no control
// character but tab (CR, LF or NUL would end or break the header).
func ValidateBindingFormat(f string) error {
	bad := func(why string) *Error {
		return Errorf(CodeInvalidArgument, "invalid binding format %q: %s", f, why).
			WithHint("write the header's value with %s where the secret goes, e.g. %q", SecretPlaceholder, DefaultBindingFormat)
	}
	switch n := strings.Count(f, SecretPlaceholder); {
	case len(f) > MaxFormatLen:
		return bad("longer than 1024 bytes").With("limit", MaxFormatLen).With("used", len(f))
	case n == 0:
		return bad("no " + SecretPlaceholder)
	case n > 1:
		return bad(SecretPlaceholder + " more than once")
	}
	if i := strings.IndexFunc(f, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }); i >= 0 {
		return bad("control character " + strconv.QuoteRune(rune(f[i])) + " is not allowed")
	}
	return nil
}

// HeaderValue returns the value of b's header for the secret's value:
// Format ("Bearer {secret}" when empty) with value in place of "{secret}".
// It does not check value; the caller refuses one that cannot go in a
// header (CR, LF, NUL).
func (b Binding) HeaderValue(secret []byte) []byte {
	f := b.Format
	if f == "" {
		f = DefaultBindingFormat
	}
	before, after, _ := strings.Cut(f, SecretPlaceholder)
	return bytes.Join([][]byte{[]byte(before), secret, []byte(after)}, nil)
}

// BindingHost is the host a sandbox sends a binding's requests to:
// name.hearth.internal.
func BindingHost(name string) string { return name + "." + GatewayDomain }

// BindingName returns the binding a request's Host names, and whether it
// names one: host is exactly <label>.hearth.internal, in any case, with an
// optional trailing dot and an optional numeric port, and <label> is a
// valid binding name (returned in lowercase).
func BindingName(host string) (string, bool) {
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		port := host[i+1:]
		if port == "" || len(port) > 5 || strings.IndexFunc(port, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
			return "", false
		}
		host = host[:i]
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	label, ok := strings.CutSuffix(host, "."+GatewayDomain)
	if !ok || ValidateBindingName(label) != nil {
		return "", false
	}
	return label, true
}
