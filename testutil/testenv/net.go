package testenv

import (
	"net"
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
