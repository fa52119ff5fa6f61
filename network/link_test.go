package network

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hearth/hearth/testutil/testenv"
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

// TestLinkExistsPerNamespace: an interface a sandbox makes in its own
// network namespace, named as the host's link of another sandbox would
// be, is not seen from the host's namespace (where the daemon's checks
// run: a sandbox cannot make the daemon believe another is attached, nor
// have it delete or reuse a host link by naming one); from inside that
// namespace it is.
func TestLinkExistsPerNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "making a network namespace needs root")
	}
	ns := fmt.Sprintf("hx-linktest-%d", os.Getpid())
	dev := fmt.Sprintf("hx%dv", os.Getpid()%1000000)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	if out, err := exec.Command("ip", "-n", ns, "link", "add", dev, "type", "veth", "peer", "name", dev+"p").CombinedOutput(); err != nil {
		t.Fatalf("ip link add in %s: %v: %s", ns, err, out)
	}
	if ok, err := linkExists(dev); ok || err != nil {
		t.Errorf("from the host, linkExists(%q) = %v, %v; want false, nil (it is in %s only)", dev, ok, err, ns)
	}
	var inside bool
	if err := InNamespace(filepath.Join("/run/netns", ns), func() (err error) {
		inside, err = linkExists(dev)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !inside {
		t.Errorf("inside %s, linkExists(%q) = false; want true", ns, dev)
	}
}
