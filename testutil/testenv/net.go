package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
)

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on (it
// was free a moment ago: a test uses it at once, as a port to refuse or to
// start a server on).
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// ReservedPort returns a TCP port on 127.0.0.1 that nothing listens on,
// below the kernel's ephemeral range (20000–29999): for a port a test
// hands to a daemon to listen on later, which that daemon's own
// listeners on port 0 (handed out from the ephemeral range) cannot take
// first, as they can a FreePort. A port is handed out once per test
// binary: two daemons given ports before either listens never share one.
func ReservedPort(t testing.TB) int {
	t.Helper()
	reserved.mu.Lock()
	defer reserved.mu.Unlock()
	for range 100 {
		port := 20000 + rand.IntN(10000)
		if reserved.ports[port] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			ln.Close()
			reserved.ports[port] = true
			return port
		}
	}
	t.Fatal("no free port in 20000-29999 after 100 tries")
	return 0
}

// reserved are the ports ReservedPort handed out.
var reserved = struct {
	mu    sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}
