package sandbox

import "strconv"

// ListeningPort is a TCP port a process in a sandbox listens on: Address
// is the local address it is bound to ("0.0.0.0", "127.0.0.1", "::").
type ListeningPort struct {
	Port    int    `json:"port"`
	Address string `json:"address"`
}

// MaxPublicPorts is how many ports of a sandbox may be public.
const MaxPublicPorts = 16

// ValidatePort checks a TCP port number: 1 to 65535.
func ValidatePort(port int) error {
	if port < 1 || port > 65535 {
		return Errorf(CodeInvalidArgument, "port %d is not a TCP port", port).WithHint("use a port from 1 to 65535")
	}
	return nil
}

// ValidatePorts checks a sandbox's public ports: at most MaxPublicPorts
// TCP ports, none repeated.
func ValidatePorts(ports []int) error {
	if len(ports) > MaxPublicPorts {
		return Errorf(CodeInvalidArgument, "%d public ports, over the limit of %d", len(ports), MaxPublicPorts).
			WithHint("make at most %d ports public", MaxPublicPorts).With("limit", MaxPublicPorts).With("used", len(ports))
	}
	seen := make(map[int]bool, len(ports))
	for _, p := range ports {
		if err := ValidatePort(p); err != nil {
			return err
		}
		if seen[p] {
			return Errorf(CodeInvalidArgument, "port %d is given twice", p).WithHint("give each port once")
		}
		seen[p] = true
	}
	return nil
}

// PortInfo is a port of a sandbox as the API shows it: whether a process
// listens on it (Address is then where), its URL, and whether that URL
// needs no token.
type PortInfo struct {
	Port      int    `json:"port"`
	Address   string `json:"address,omitempty"`
	Listening bool   `json:"listening"`
	URL       string `json:"url"`
	Public    bool   `json:"public"`
}

// ProxyURL is the URL of port of the sandbox called name (its stored name)
// for a client that reaches the daemon at scheme://host: with a base
// domain the host {port}-{name}.{domain}, else the daemon's proxy path
// /v1/sandboxes/{name}/proxy/{port}/.
func ProxyURL(scheme, host, domain, name string, port int) string {
	if domain != "" {
		return scheme + "://" + strconv.Itoa(port) + "-" + name + "." + domain + "/"
	}
	return scheme + "://" + host + "/v1/sandboxes/" + name + "/proxy/" + strconv.Itoa(port) + "/"
}

// Network modes of a sandbox. None has loopback only; egress adds
// outbound connections through NAT, never to the host, other sandboxes or
// private and link-local networks. Nothing reaches a sandbox from outside
// but through its URL (see ProxyURL).
const (
	NetworkNone   = "none"
	NetworkEgress = "egress"
)

// ValidateNetwork checks a network mode; "" is valid (the default).
func ValidateNetwork(mode string) error {
	switch mode {
	case "", NetworkNone, NetworkEgress:
		return nil
	}
	return Errorf(CodeInvalidArgument, "unknown network mode %q", mode).
		WithHint("use %q (loopback only) or %q (outbound connections)", NetworkNone, NetworkEgress)
}
