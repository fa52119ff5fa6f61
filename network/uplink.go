package network

import (
	"bufio"
	"bytes"
	"net"
	"net/netip"
	"os"
	"strings"
)

// UplinkNetworks returns the IPv4 networks of the host's interfaces that
// carry a default route: the host's own LAN, whose neighbours (its router
// among them) are no business of a sandbox even when their addresses are
// public. Pass them as Options.Deny.
func UplinkNetworks() ([]netip.Prefix, error) {
	routes, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, name := range defaultRouteInterfaces(routes) {
		ifc, err := net.InterfaceByName(name)
		if err != nil {
			return nil, err
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			return nil, err
		}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
				out = append(out, p.Masked())
			}
		}
	}
	return out, nil
}

// defaultRouteInterfaces reads /proc/net/route and returns the interfaces
// of its default routes (destination and mask 0), each once.
func defaultRouteInterfaces(table []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(table))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 8 || f[1] != "00000000" || f[7] != "00000000" {
			continue
		}
		dup := false
		for _, n := range out {
			dup = dup || n == f[0]
		}
		if !dup {
			out = append(out, f[0])
		}
	}
	return out
}
