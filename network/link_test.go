package network

import (
	"net"
	"strings"
	"testing"
)

// TestLinkExists: every interface the host lists exists, by its name; a
// name none has, an empty one and one too long for an interface do not.
func TestLinkExists(t *testing.T) {
	ifcs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	if len(ifcs) == 0 {
		t.Fatal("the host lists no interfaces (not even lo)")
	}
	for _, ifc := range ifcs {
		if ok, err := linkExists(ifc.Name); !ok || err != nil {
			t.Errorf("linkExists(%q) = %v, %v; want true (the host lists it)", ifc.Name, ok, err)
		}
	}
	for _, name := range []string{"hx-no-such-0", "", strings.Repeat("x", 40)} {
		if ok, err := linkExists(name); ok || err != nil {
			t.Errorf("linkExists(%q) = %v, %v; want false, nil", name, ok, err)
		}
	}
}
