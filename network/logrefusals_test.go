package network_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/hearth/hearth/network"
	"github.com/hearth/hearth/sandbox"
)

// oneSandbox knows sandbox id1, web of tenant t1.
type oneSandbox struct{}

func (oneSandbox) ByID(_ context.Context, id string) (sandbox.Sandbox, error) {
	if id != "id1" {
		return sandbox.Sandbox{}, sandbox.Errorf(sandbox.CodeNotFound, "no sandbox %s", id)
	}
	return sandbox.Sandbox{ID: id, Name: "web", Tenant: "t1"}, nil
}

func TestLogRefusals(t *testing.T) {
	var counted []string
	var logged bytes.Buffer
	on := network.LogRefusals(oneSandbox{}, func(tenant, kind string) { counted = append(counted, tenant+"/"+kind) },
		slog.New(slog.NewTextHandler(&logged, nil)))
	on(network.Refusal{Sandbox: "id1", Domain: "evil.example"})
	on(network.Refusal{Sandbox: "id1", Dst: netip.MustParseAddr("10.1.2.3"), Proto: "TCP", Port: 22})
	on(network.Refusal{Sandbox: "gone", Dst: netip.MustParseAddr("10.1.2.3"), Proto: "UDP", Port: 53})
	if want := []string{"t1/lookup", "t1/connection", "/connection"}; !slices.Equal(counted, want) {
		t.Errorf("counted %q, want %q", counted, want)
	}
	for _, s := range []string{"sandbox=web", "domain=evil.example", "dst=10.1.2.3", "port=22", "id=gone"} {
		if !strings.Contains(logged.String(), s) {
			t.Errorf("the log lacks %q:\n%s", s, logged.String())
		}
	}
	network.LogRefusals(oneSandbox{}, nil, nil)(network.Refusal{Sandbox: "id1"}) // nil count and log: no panic
}
