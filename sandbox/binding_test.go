package sandbox_test

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// wantInvalid fails the test unless err is invalid_argument with a hint.
func wantInvalid(t *testing.T, call string, err error) {
	t.Helper()
	if !sandbox.IsCode(err, sandbox.CodeInvalidArgument) || sandbox.AsError(err).Hint == "" {
		t.Errorf("%s = %v, want invalid_argument with a hint", call, err)
	}
}

// TestValidateBindingName: a binding's name follows the sandbox names'
// rule (a DNS label; TestValidateName has the cases), and says it is a
// binding's.
func TestValidateBindingName(t *testing.T) {
	for _, name := range []string{"openai", "gh-api-2", strings.Repeat("a", 63)} {
		if err := sandbox.ValidateBindingName(name); err != nil {
			t.Errorf("ValidateBindingName(%q) = %v, want ok", name, err)
		}
	}
	for _, name := range []string{"", "dot.ted", "Upper", "-lead"} {
		err := sandbox.ValidateBindingName(name)
		wantInvalid(t, "ValidateBindingName("+name+")", err)
		if err != nil && !strings.Contains(err.Error(), "invalid binding name") {
			t.Errorf("ValidateBindingName(%q) = %v, want it to say it is a binding name", name, err)
		}
	}
}

func TestNormalizeUpstream(t *testing.T) {
	tests := []struct {
		in, want string // want "" means refused
	}{
		{"https://api.openai.com", "https://api.openai.com"},
		{"https://api.openai.com/", "https://api.openai.com/"},
		{"https://api.openai.com/v1", "https://api.openai.com/v1"},
		{"https://api.openai.com/v1/", "https://api.openai.com/v1/"},
		{"HTTPS://API.OpenAI.com/V1", "https://api.openai.com/V1"},
		{"http://example.com:8080/x", "http://example.com:8080/x"},
		{"http://203.0.113.7", "http://203.0.113.7"},
		{"http://203.0.113.7:65535/a", "http://203.0.113.7:65535/a"},
		{"http://[2001:DB8::1]:8443/p", "http://[2001:db8::1]:8443/p"},
		{"http://[2001:db8::1]", "http://[2001:db8::1]"},
		{"https://example.com/a%2Fb", "https://example.com/a%2Fb"},
		{"https://example.com/with space", "https://example.com/with%20space"},
		{"", ""},
		{"api.openai.com", ""},
		{"/v1", ""},
		{"ftp://example.com", ""},
		{"file:///etc/passwd", ""},
		{"https:example.com", ""},
		{"https://", ""},
		{"https://:443", ""},
		{"https://user:pw@example.com", ""},
		{"https://user@example.com", ""},
		{"https://example.com/?q=1", ""},
		{"https://example.com/?", ""},
		{"https://example.com/#frag", ""},
		{"https://example.com/#", ""},
		{"https://example.com:0", ""},
		{"https://example.com:65536", ""},
		{"https://example.com:", ""},
		{"https://example.com:http", ""},
		{"https://exa_mple.com", ""},
		{"https://-bad.com", ""},
		{"https://example.com.", ""},
		{"https://bücher.example", ""},
		{"https://[fe80::1%25eth0]", ""},
		{"http://openai.hearth.internal/v1", ""},
		{"http://HEARTH.INTERNAL", ""},
		{"https://" + strings.Repeat("a", 63) + "." + strings.Repeat("b", 64) + ".com", ""},
		{"https://example.com/" + strings.Repeat("p", sandbox.MaxUpstreamLen), ""},
	}
	for _, tt := range tests {
		got, err := sandbox.NormalizeUpstream(tt.in)
		if tt.want == "" {
			if err == nil {
				t.Errorf("NormalizeUpstream(%q) = %q, want an error", tt.in, got)
			} else {
				wantInvalid(t, "NormalizeUpstream("+tt.in+")", err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("NormalizeUpstream(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
		// Normal form is a fixed point.
		if again, err := sandbox.NormalizeUpstream(got); err != nil || again != got {
			t.Errorf("NormalizeUpstream(%q) = %q, %v; want it unchanged", got, again, err)
		}
	}
}

func TestValidateBindingHeader(t *testing.T) {
	tests := []struct {
		header string
		ok     bool
	}{
		{"Authorization", true},
		{"x-api-key", true},
		{"X-Goog-Api-Key", true},
		{"Cookie", true},
		{"weird!#$%&'*+-.^_`|~1", true},
		{"", false},
		{"X Api", false},
		{"X-Api:", false},
		{"X-Ünï", false},
		{"X-\r\nEvil", false},
		{"(comment)", false},
		{strings.Repeat("X", 257), false},
		{"Host", false},
		{"host", false},
		{"Content-Length", false},
		{"Transfer-Encoding", false},
		{"TE", false},
		{"Trailer", false},
		{"Connection", false},
		{"keep-alive", false},
		{"Upgrade", false},
		{"Proxy-Authorization", false},
		{"proxy-connection", false},
	}
	for _, tt := range tests {
		err := sandbox.ValidateBindingHeader(tt.header)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateBindingHeader(%q) = %v, want ok=%v", tt.header, err, tt.ok)
		}
		if err != nil {
			wantInvalid(t, "ValidateBindingHeader("+tt.header+")", err)
		}
	}
}

func TestValidateBindingFormat(t *testing.T) {
	tests := []struct {
		format string
		ok     bool
	}{
		{"Bearer {secret}", true},
		{"{secret}", true},
		{"token={secret}; tab\tok", true},
		{"Basic {secret}==", true},
		{"", false},
		{"Bearer", false},
		{"Bearer {SECRET}", false},
		{"{secret}:{secret}", false},
		{"Bearer {secret}\r\nX-Evil: 1", false},
		{"Bearer {secret}\n", false},
		{"Bearer {secret}\x00", false},
		{"Bearer {secret}\x7f", false},
		{"{secret}" + strings.Repeat("x", sandbox.MaxFormatLen), false},
	}
	for _, tt := range tests {
		err := sandbox.ValidateBindingFormat(tt.format)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateBindingFormat(%q) = %v, want ok=%v", tt.format, err, tt.ok)
		}
		if err != nil {
			wantInvalid(t, "ValidateBindingFormat("+tt.format+")", err)
		}
	}
}

func TestNormalizeBinding(t *testing.T) {
	valid := sandbox.Binding{Tenant: "acme", Name: "openai", Secret: "OPENAI_API_KEY", Upstream: "https://API.openai.com/v1"}
	tests := []struct {
		name string
		edit func(*sandbox.Binding)
		want sandbox.Binding // zero: refused
	}{
		{"defaults", func(*sandbox.Binding) {}, sandbox.Binding{Tenant: "acme", Name: "openai", Secret: "OPENAI_API_KEY",
			Upstream: "https://api.openai.com/v1", Header: "Authorization", Format: "Bearer {secret}"}},
		{"own header, canonical", func(b *sandbox.Binding) { b.Header, b.Format = "x-api-key", "{secret}" }, sandbox.Binding{
			Tenant: "acme", Name: "openai", Secret: "OPENAI_API_KEY", Upstream: "https://api.openai.com/v1", Header: "X-Api-Key", Format: "{secret}"}},
		{"bad name", func(b *sandbox.Binding) { b.Name = "Open_AI" }, sandbox.Binding{}},
		{"no secret", func(b *sandbox.Binding) { b.Secret = "" }, sandbox.Binding{}},
		{"bad secret", func(b *sandbox.Binding) { b.Secret = "api-key" }, sandbox.Binding{}},
		{"no upstream", func(b *sandbox.Binding) { b.Upstream = "" }, sandbox.Binding{}},
		{"bad upstream", func(b *sandbox.Binding) { b.Upstream = "ftp://x" }, sandbox.Binding{}},
		{"hop-by-hop header", func(b *sandbox.Binding) { b.Header = "Connection" }, sandbox.Binding{}},
		{"format without placeholder", func(b *sandbox.Binding) { b.Format = "Bearer x" }, sandbox.Binding{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := valid
			tt.edit(&b)
			got, err := sandbox.NormalizeBinding(b)
			if tt.want == (sandbox.Binding{}) {
				wantInvalid(t, "NormalizeBinding", err)
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("NormalizeBinding(%+v) = %+v, %v; want %+v", b, got, err, tt.want)
			}
		})
	}
}

func TestHeaderValue(t *testing.T) {
	tests := []struct {
		format string
		want   string
	}{
		{"Bearer {secret}", "Bearer sk-123"},
		{"", "Bearer sk-123"}, // the default
		{"{secret}", "sk-123"},
		{"token={secret}; v=2", "token=sk-123; v=2"},
	}
	for _, tt := range tests {
		b := sandbox.Binding{Format: tt.format}
		if got := string(b.HeaderValue([]byte("sk-123"))); got != tt.want {
			t.Errorf("Binding{Format: %q}.HeaderValue(sk-123) = %q, want %q", tt.format, got, tt.want)
		}
	}
	// The result is a new slice: the caller may wipe it without touching the secret.
	secret := []byte("sk-123")
	v := sandbox.Binding{Format: "{secret}"}.HeaderValue(secret)
	v[0] = 'X'
	if string(secret) != "sk-123" {
		t.Errorf("HeaderValue shares memory with the secret: %q", secret)
	}
}

func TestBindingHost(t *testing.T) {
	if got := sandbox.BindingHost("openai"); got != "openai.hearth.internal" {
		t.Errorf("BindingHost(openai) = %q, want openai.hearth.internal", got)
	}
	tests := []struct {
		host, want string
		ok         bool
	}{
		{"openai.hearth.internal", "openai", true},
		{"OpenAI.Hearth.Internal", "openai", true},
		{"openai.hearth.internal.", "openai", true},
		{"openai.hearth.internal:80", "openai", true},
		{"openai.hearth.internal.:8080", "openai", true},
		{"gh-2.hearth.internal", "gh-2", true},
		{"hearth.internal", "", false},
		{".hearth.internal", "", false},
		{"a.b.hearth.internal", "", false},
		{"openai.hearth.internal:", "", false},
		{"openai.hearth.internal:http", "", false},
		{"openai.hearth.internal:123456", "", false},
		{"openai.hearth.internal..", "", false},
		{"openaihearth.internal", "", false},
		{"openai.hearth.internal.evil.com", "", false},
		{"-x.hearth.internal", "", false},
		{"under_score.hearth.internal", "", false},
		{"api.openai.com", "", false},
		{"[::1]:80", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, ok := sandbox.BindingName(tt.host)
		if got != tt.want || ok != tt.ok {
			t.Errorf("BindingName(%q) = %q, %v; want %q, %v", tt.host, got, ok, tt.want, tt.ok)
		}
	}
}

func TestBindingJSON(t *testing.T) {
	at := time.Date(2026, time.January, 2, 3, 4, 5, 0, time.UTC)
	b := sandbox.Binding{Tenant: "acme", Name: "openai", Secret: "K", Upstream: "https://x", Header: "Authorization", Format: "Bearer {secret}", CreatedAt: at, UpdatedAt: at}
	raw, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]any
	if err := json.Unmarshal(raw, &keys); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"tenant", "name", "secret", "upstream", "header", "format", "created_at", "updated_at"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("Binding JSON %s has no %q", raw, k)
		}
	}
	if len(keys) != 8 {
		t.Errorf("Binding JSON %s has %d keys, want 8", raw, len(keys))
	}
}

// FuzzBindingName: whatever a Host header holds, a name BindingName accepts
// is a valid binding name whose host it came from.
func FuzzBindingName(f *testing.F) {
	for _, s := range []string{"openai.hearth.internal", "A.HEARTH.INTERNAL.:80", "x.hearth.internal:", "[::1]:1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		name, ok := sandbox.BindingName(host)
		if !ok {
			if name != "" {
				t.Errorf("BindingName(%q) = %q, false; want no name", host, name)
			}
			return
		}
		if err := sandbox.ValidateBindingName(name); err != nil {
			t.Errorf("BindingName(%q) = %q, an invalid name: %v", host, name, err)
		}
		if !strings.HasPrefix(strings.ToLower(host), sandbox.BindingHost(name)) {
			t.Errorf("BindingName(%q) = %q, which is not the host's", host, name)
		}
	})
}

// FuzzNormalizeUpstream: an accepted upstream normalizes to a fixed point
// that is itself accepted, http or https, without query or fragment.
func FuzzNormalizeUpstream(f *testing.F) {
	for _, s := range []string{"https://api.openai.com/v1", "http://[::1]:80/", "https://u@x", "ftp://x", "http://x/?#"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := sandbox.NormalizeUpstream(raw)
		if err != nil {
			if !sandbox.IsCode(err, sandbox.CodeInvalidArgument) {
				t.Errorf("NormalizeUpstream(%q) = %v, want invalid_argument", raw, err)
			}
			return
		}
		u, err := url.Parse(got)
		if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			t.Errorf("NormalizeUpstream(%q) = %q (%v), want an http(s) URL with a host and no user, query or fragment", raw, got, err)
		}
		if again, err := sandbox.NormalizeUpstream(got); err != nil || again != got {
			t.Errorf("NormalizeUpstream(%q) = %q, %v; want the fixed point %q", got, again, err, got)
		}
	})
}
