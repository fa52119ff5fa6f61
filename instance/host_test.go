package instance_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/instance"
)

// TestHostUses, as root: a slot is in use on the host while an interface
// begins with its link prefix, or an iptables rule matches its links (a
// departed instance's chain), and free once they are gone.
func TestHostUses(t *testing.T) {
	drivertest.RequireRoot(t)
	link, rule := instance.NamesOf("x", instance.MaxSlot), instance.NamesOf("x", instance.MaxSlot-1)
	for _, n := range []instance.Names{link, rule} {
		if used, err := instance.HostUses(n); used || err != nil {
			t.Fatalf("HostUses(slot %d) = %v, %v before the test made anything", n.Slot, used, err)
		}
	}
	veth := link.LinkPrefix + "use"
	sh(t, "ip", "link", "add", veth, "type", "veth", "peer", "name", veth+"p")
	t.Cleanup(func() { exec.Command("ip", "link", "del", veth).Run() })
	const chain = "HEARTHUSETEST"
	sh(t, "iptables", "-w", "-N", chain)
	t.Cleanup(func() {
		exec.Command("iptables", "-w", "-F", chain).Run()
		exec.Command("iptables", "-w", "-X", chain).Run()
	})
	sh(t, "iptables", "-w", "-A", chain, "-i", rule.LinkPrefix+"+", "-j", "RETURN")
	for _, n := range []instance.Names{link, rule} {
		if used, err := instance.HostUses(n); !used || err != nil {
			t.Errorf("HostUses(slot %d, %s) = %v, %v; want true", n.Slot, n.LinkPrefix, used, err)
		}
	}
	sh(t, "ip", "link", "del", veth)
	sh(t, "iptables", "-w", "-F", chain)
	for _, n := range []instance.Names{link, rule} {
		if used, err := instance.HostUses(n); used || err != nil {
			t.Errorf("HostUses(slot %d) = %v, %v once gone; want false", n.Slot, used, err)
		}
	}
}

// sh runs a command, failing t on error.
func sh(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}
