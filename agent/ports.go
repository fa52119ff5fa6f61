package agent

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hearth/hearth/internal/kernfile"
	"github.com/hearth/hearth/sandbox"
)

// tcpListen is the state of a listening socket in /proc/net/tcp
// (TCP_LISTEN in the kernel's include/net/tcp_states.h).
const tcpListen = "0A"

// listeningPorts returns the TCP ports processes in the sandbox listen on,
// read from procNet's tcp and tcp6 ("/proc/net" is the agent's network
// namespace, which is the sandbox's; under gVisor, its netstack's). A
// missing tcp6 is IPv6 turned off, not an error.
func listeningPorts(procNet string) ([]sandbox.ListeningPort, error) {
	tcp, err := kernfile.Read(filepath.Join(procNet, "tcp"))
	if err != nil {
		return nil, err
	}
	tcp6, err := kernfile.Read(filepath.Join(procNet, "tcp6"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return parseListening(tcp, tcp6)
}

// parseListening parses the contents of /proc/net/tcp and /proc/net/tcp6
// (either may be empty) and returns their listening sockets, sorted by port
// then address, each once (sockets sharing a port with SO_REUSEPORT are
// one). It fails on an entry it cannot read, so that a change of format
// shows rather than hiding ports.
//
// Each entry is a line "sl: local remote st ...", where local is the
// address in hex, then ':' and the port in hex. The kernel prints the
// address as 32-bit words, each as a number in the host's byte order (4
// bytes for IPv4, 16 for IPv6), and the port as a number.
func parseListening(files ...[]byte) ([]sandbox.ListeningPort, error) {
	out := []sandbox.ListeningPort{}
	for _, data := range files {
		for line := range bytes.Lines(data) {
			f := strings.Fields(string(line))
			if len(f) == 0 || f[0] == "sl" { // the header
				continue
			}
			if len(f) < 4 || !strings.HasSuffix(f[0], ":") {
				return nil, fmt.Errorf("agent: bad /proc/net/tcp entry %q", line)
			}
			if !strings.EqualFold(f[3], tcpListen) {
				continue
			}
			p, err := parseSocketAddr(f[1])
			if err != nil {
				return nil, fmt.Errorf("agent: bad /proc/net/tcp entry %q: %w", line, err)
			}
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b sandbox.ListeningPort) int {
		return cmp.Or(cmp.Compare(a.Port, b.Port), strings.Compare(a.Address, b.Address))
	})
	return slices.Compact(out), nil
}

// parseSocketAddr parses a local address of /proc/net/tcp or tcp6, such as
// "0100007F:1F90" (127.0.0.1:8080 on a little-endian host).
func parseSocketAddr(s string) (sandbox.ListeningPort, error) {
	hexAddr, hexPort, ok := strings.Cut(s, ":")
	if !ok || len(hexPort) != 4 {
		return sandbox.ListeningPort{}, fmt.Errorf("address %q is not ADDR:PORT", s)
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil || port == 0 {
		return sandbox.ListeningPort{}, fmt.Errorf("bad port in %q", s)
	}
	if len(hexAddr) != 8 && len(hexAddr) != 32 {
		return sandbox.ListeningPort{}, fmt.Errorf("address %q is neither IPv4 nor IPv6", s)
	}
	var b [16]byte
	for i := 0; i < len(hexAddr); i += 8 {
		w, err := strconv.ParseUint(hexAddr[i:i+8], 16, 32)
		if err != nil {
			return sandbox.ListeningPort{}, fmt.Errorf("bad address in %q", s)
		}
		binary.NativeEndian.PutUint32(b[i/2:], uint32(w))
	}
	var addr netip.Addr
	if len(hexAddr) == 8 {
		addr = netip.AddrFrom4([4]byte(b[:4]))
	} else {
		addr = netip.AddrFrom16(b)
	}
	return sandbox.ListeningPort{Port: int(port), Address: addr.String()}, nil
}
