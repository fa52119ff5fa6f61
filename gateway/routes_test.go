package gateway_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/hearth/hearth/gateway"
	"github.com/hearth/hearth/sandbox"
)

// addrs is a network host with one sandbox, sb1 at 10.0.0.2.
type addrs struct{}

func (addrs) SandboxAt(a netip.Addr) (string, bool) {
	return "sb1", a == netip.MustParseAddr("10.0.0.2")
}

// bindings has one binding, openai of sandbox sb1.
type bindings struct{}

var errNoBinding = sandbox.Errorf(sandbox.CodeNotFound, "no binding")

func (bindings) GatewayRoute(_ context.Context, id, name string) (sandbox.Binding, []byte, error) {
	if id != "sb1" || name != "openai" {
		return sandbox.Binding{}, nil, errNoBinding
	}
	return sandbox.Binding{Name: "openai", Secret: "key", Upstream: "https://api.example.com/v1", Header: "Authorization"}, []byte("s3cret"), nil
}

func TestRoutes(t *testing.T) {
	r := gateway.Routes{Addresses: addrs{}, Bindings: bindings{}}
	sb := netip.MustParseAddr("10.0.0.2")

	got, err := r.Route(t.Context(), sb, "openai")
	if err != nil {
		t.Fatalf("Route(sandbox, openai) = %v", err)
	}
	if got.Upstream.String() != "https://api.example.com/v1" || got.Header != "Authorization" ||
		string(got.Value) != "Bearer s3cret" || string(got.Secret) != "s3cret" || got.SecretName != "key" {
		t.Errorf("Route(sandbox, openai) = %+v", got)
	}
	if _, err := r.Route(t.Context(), sb, "other"); !errors.Is(err, errNoBinding) {
		t.Errorf("Route(sandbox, other) = %v, want the Bindings' error", err)
	}
	if _, err := r.Route(t.Context(), netip.MustParseAddr("10.0.0.9"), "openai"); !sandbox.IsCode(err, sandbox.CodePermissionDenied) {
		t.Errorf("Route(not a sandbox) = %v, want permission_denied", err)
	}
}

func TestLogRequests(t *testing.T) {
	var codes []string
	log := gateway.LogRequests(func(code string) { codes = append(codes, code) }, nil)
	log(gateway.Result{Binding: "openai", Status: 200})
	log(gateway.Result{Binding: "x", Status: 404, Code: sandbox.CodeNotFound})
	if len(codes) != 2 || codes[0] != "ok" || codes[1] != string(sandbox.CodeNotFound) {
		t.Errorf("counted codes %q, want [ok not_found]", codes)
	}
	gateway.LogRequests(nil, nil)(gateway.Result{}) // nil count and log: no panic
}
