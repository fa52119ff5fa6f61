package sandbox_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hearth/hearth/sandbox"
)

func TestDomainPattern(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"example.com", "example.com", true},
		{"API.Example.COM.", "api.example.com", true},
		{"*.example.com", "*.example.com", true},
		{"*.Example.com.", "*.example.com", true},
		{"_dmarc.example.com", "_dmarc.example.com", true},
		{"xn--bcher-kva.example", "xn--bcher-kva.example", true},
		{"a-b.example", "a-b.example", true},
		{"localhost", "", false},
		{"*.com.", "", false},
		{"*", "", false},
		{"*example.com", "", false},
		{"a.*.example.com", "", false},
		{"-a.example", "", false},
		{"a-.example", "", false},
		{"a..example", "", false},
		{".example.com", "", false},
		{"203.0.113.7", "", false},
		{"300.1.1.1", "", false},
		{"203.0.113.0/24", "", false},
		{"exa mple.com", "", false},
		{"exa\"mple.com", "", false},
		{"", "", false},
		{"a." + string(make([]byte, 64)) + ".com", "", false},
	} {
		got, ok := sandbox.DomainPattern(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("DomainPattern(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	long := ""
	for range 64 {
		long += "abc."
	}
	if _, ok := sandbox.DomainName(long + "com"); ok {
		t.Errorf("DomainName of %d characters ok, want not (at most 253)", len(long)+3)
	}
}

func TestDomainMatches(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"example.com", "example.com", true},
		{"example.com", "www.example.com", false},
		{"*.example.com", "www.example.com", true},
		{"*.example.com", "a.b.example.com", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", "badexample.com", false},
		{"*.example.com", "", false},
	} {
		if got := sandbox.DomainMatches(tc.pattern, tc.name); got != tc.want {
			t.Errorf("DomainMatches(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct {
		inner, outer string
		want         bool
	}{
		{"api.example.com", "*.example.com", true},
		{"api.example.com", "api.example.com", true},
		{"*.example.com", "*.example.com", true},
		{"*.a.example.com", "*.example.com", true},
		{"*.example.com", "*.a.example.com", false},
		{"*.example.com", "example.com", false},
		{"example.com", "*.example.com", false},
		{"api.example.org", "*.example.com", false},
	} {
		if got := sandbox.DomainWithin(tc.inner, tc.outer); got != tc.want {
			t.Errorf("DomainWithin(%q, %q) = %v, want %v", tc.inner, tc.outer, got, tc.want)
		}
	}
}

func TestEgressEffective(t *testing.T) {
	for _, tc := range []struct {
		name        string
		own, tenant sandbox.EgressPolicy
		allow, deny string
		wantInvalid bool
	}{
		{name: "nothing", allow: "{[] []}", deny: "{[] []}"},
		{name: "mixed lists parsed", own: sandbox.EgressPolicy{Allow: []string{"203.0.113.7", "API.example.com"}, Deny: []string{"*.ads.example"}},
			allow: "{[203.0.113.7/32] [api.example.com]}", deny: "{[] [*.ads.example]}"},
		{name: "tenant's allow taken", tenant: sandbox.EgressPolicy{Allow: []string{"*.example.com", "198.51.100.0/24"}, Deny: []string{"x.example.com"}},
			allow: "{[198.51.100.0/24] [*.example.com]}", deny: "{[] [x.example.com]}"},
		{name: "within the tenant's", own: sandbox.EgressPolicy{Allow: []string{"*.api.example.com", "198.51.100.9"}, Deny: []string{"203.0.113.1"}},
			tenant: sandbox.EgressPolicy{Allow: []string{"*.example.com", "198.51.100.0/24"}, Deny: []string{"x.example.com"}},
			allow:  "{[198.51.100.9/32] [*.api.example.com]}", deny: "{[203.0.113.1/32] [x.example.com]}"},
		{name: "domain outside", own: sandbox.EgressPolicy{Allow: []string{"example.com"}}, tenant: sandbox.EgressPolicy{Allow: []string{"*.example.com"}}, wantInvalid: true},
		{name: "domain, tenant allowing networks only", own: sandbox.EgressPolicy{Allow: []string{"api.example.com"}}, tenant: sandbox.EgressPolicy{Allow: []string{"0.0.0.0/0"}}, wantInvalid: true},
		{name: "not an entry", own: sandbox.EgressPolicy{Deny: []string{"nope"}}, wantInvalid: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			allow, deny, err := tc.own.Effective(tc.tenant)
			var e *sandbox.Error
			if tc.wantInvalid {
				if !errors.As(err, &e) || e.Code != sandbox.CodeInvalidArgument {
					t.Errorf("Effective = %v, want invalid_argument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(allow); got != tc.allow {
				t.Errorf("allow = %s, want %s", got, tc.allow)
			}
			if got := fmt.Sprint(deny); got != tc.deny {
				t.Errorf("deny = %s, want %s", got, tc.deny)
			}
		})
	}
}
