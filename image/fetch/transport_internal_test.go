package fetch

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"
)

// TestPublicOnlyDials: the guard dials the addresses it checked, never the
// name, skipping internal ones; a listed host is dialed by name; a host
// with only internal addresses is ErrInternal.
func TestPublicOnlyDials(t *testing.T) {
	addrs := map[string][]string{
		"mixed.test":    {"10.0.0.1", "169.254.169.254", "203.0.113.9", "203.0.113.10"},
		"internal.test": {"127.0.0.1", "::1", "fe80::1", "0.0.0.0", "192.168.1.1", "::ffff:10.1.2.3"},
		"listed.test":   {"127.0.0.1"},
	}
	lookup := func(_ context.Context, host string) ([]netip.Addr, error) {
		var out []netip.Addr
		for _, a := range addrs[host] {
			out = append(out, netip.MustParseAddr(a))
		}
		return out, nil
	}
	var dialed []string
	refused := errors.New("refused")
	dial := func(_ context.Context, _, addr string) (net.Conn, error) {
		dialed = append(dialed, addr)
		if addr == "203.0.113.9:443" {
			return nil, refused // the first public address does not answer
		}
		c, _ := net.Pipe()
		return c, nil
	}
	o := &Options{PublicOnly: true, lookup: lookup, Registries: map[string]Registry{"listed.test": {}}}
	guarded := o.publicOnly(dial)
	for _, tc := range []struct {
		addr   string
		dialed []string
		kind   error
	}{
		{"mixed.test:443", []string{"203.0.113.9:443", "203.0.113.10:443"}, nil},
		{"internal.test:443", nil, ErrInternal},
		{"169.254.169.254:80", nil, ErrInternal},
		{"listed.test:443", []string{"listed.test:443"}, nil},
		{"listed.test:8443", nil, ErrInternal}, // listed for its default port only
	} {
		dialed = nil
		c, err := guarded(t.Context(), "tcp", tc.addr)
		if c != nil {
			c.Close()
		}
		if !slices.Equal(dialed, tc.dialed) || (tc.kind == nil) != (err == nil) || (tc.kind != nil && !errors.Is(err, tc.kind)) {
			t.Errorf("dial %s: dialed %q, err %v; want %q, kind %v", tc.addr, dialed, err, tc.dialed, tc.kind)
		}
	}
}
