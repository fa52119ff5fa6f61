package oci_test

import (
	"context"
	"errors"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/driver/oci"
	"github.com/hearth/hearth/network"
)

// The network host of these tests has a name, link prefix and subnet of its
// own, so that it never meets a daemon's, nor the network package's tests
// running at the same time.
const (
	netName   = "hearthoci"
	netPrefix = "ho"
)

var netSubnet = netip.MustParsePrefix("10.201.0.0/16")

// openNetHost returns a network host on stateDir for the tests.
func openNetHost(t testing.TB, stateDir string) *network.Host {
	t.Helper()
	h, err := network.New(network.Options{
		Subnet:     netSubnet,
		StateDir:   stateDir,
		Name:       netName,
		LinkPrefix: netPrefix,
		Logger:     testLogger(t),
	})
	if err != nil {
		t.Fatalf("network.New() = %v", err)
	}
	return h
}

// newNetHost is openNetHost, and in t's cleanup (which runs after that of
// sandboxes started later) it tears the host down and wants nothing of it
// left: no namespace, no link, no iptables rule.
func newNetHost(t testing.TB, stateDir string) *network.Host {
	t.Helper()
	h := openNetHost(t, stateDir)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := h.Teardown(ctx); err != nil {
			t.Errorf("cleanup: Teardown() = %v", err)
		}
		for _, left := range netLeftovers(t) {
			t.Errorf("after Teardown, left on the host: %s", left)
		}
	})
	return h
}

// netLeftovers lists what the tests' network hosts left on the host.
func netLeftovers(t testing.TB) []string {
	t.Helper()
	var left []string
	for _, cmd := range [][]string{
		{"ip", "netns", "list"},
		{"ip", "-o", "link", "show"},
		{"iptables", "-w", "-S"},
		{"iptables", "-w", "-t", "nat", "-S"},
	} {
		out, err := exec.Command(cmd[0], cmd[1:]...).Output()
		if err != nil {
			t.Errorf("%s: %v", strings.Join(cmd, " "), err)
			continue
		}
		for line := range strings.Lines(string(out)) {
			if strings.Contains(line, netName+"-") || strings.Contains(line, strings.ToUpper(netName)+"-") || strings.Contains(line, ": "+netPrefix) {
				left = append(left, strings.TrimSpace(line))
			}
		}
	}
	return left
}

// TestEgressUnavailable: a driver with no network host says so, and
// refuses an egress start before it makes anything; an unknown mode is
// refused too.
func TestEgressUnavailable(t *testing.T) {
	d, err := oci.New(oci.Options{Runtime: oci.RuntimeRunc, Binary: "/bin/true", StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if d.Capabilities().Egress {
		t.Errorf("Capabilities().Egress = true with no network host")
	}
	spec := driver.Spec{ID: "egress1", RootFS: "/", AgentPath: "/bin/true", Network: driver.NetworkEgress}
	if err := d.Start(t.Context(), spec); !errors.Is(err, oci.ErrNoEgress) {
		t.Errorf("Start(%s network) = %v, want ErrNoEgress", spec.Network, err)
	}
	spec.Network = "bridge"
	if err := d.Start(t.Context(), spec); err == nil || !strings.Contains(err.Error(), "unknown network mode") {
		t.Errorf("Start(%s network) = %v, want an unknown-mode error", spec.Network, err)
	}
	if _, err := d.State(t.Context(), spec.ID); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("State(%s) after refused starts = %v, want ErrNotFound", spec.ID, err)
	}
}

// TestRuntimeFlagsNetwork: the network is per sandbox, so RuntimeFlags may
// not set it.
func TestRuntimeFlagsNetwork(t *testing.T) {
	for _, f := range []string{"--network=host", "--network"} {
		if _, err := oci.New(oci.Options{Runtime: oci.RuntimeRunsc, Binary: "/bin/true", StateDir: t.TempDir(), RuntimeFlags: []string{f}}); err == nil {
			t.Errorf("New(RuntimeFlags %q) succeeded, want a refusal", f)
		}
	}
}

func TestNetworkFlags(t *testing.T) {
	for _, tc := range []struct {
		runtime, mode string
		want          []string
	}{
		{oci.RuntimeRunsc, "", []string{"--network=none"}},
		{oci.RuntimeRunsc, driver.NetworkNone, []string{"--network=none"}},
		{oci.RuntimeRunsc, driver.NetworkEgress, []string{"--network=sandbox"}},
		{oci.RuntimeRunc, driver.NetworkEgress, nil},
		{oci.RuntimeCrun, driver.NetworkNone, nil},
	} {
		if got := oci.NetworkFlags(tc.runtime, tc.mode); !slices.Equal(got, tc.want) {
			t.Errorf("networkFlags(%s, %q) = %q, want %q", tc.runtime, tc.mode, got, tc.want)
		}
	}
	if f := oci.RuntimeFlags(oci.RuntimeRunsc); slices.ContainsFunc(f, func(s string) bool { return strings.HasPrefix(s, "--network") }) {
		t.Errorf("runtimeFlags(runsc) = %q, want no --network: it is per sandbox", f)
	}
}

// TestBundleSpecNetns: an egress sandbox joins the attachment's namespace;
// any other gets a new one.
func TestBundleSpecNetns(t *testing.T) {
	spec := driver.Spec{ID: "x1", RootFS: "/r", AgentPath: "/a"}
	for _, netns := range []string{"", "/run/netns/hearth-x1"} {
		got := oci.BundleSpec(oci.RuntimeRunsc, spec, "/s", "hearth", netns)
		i := slices.IndexFunc(got.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.NetworkNamespace })
		if i < 0 || got.Linux.Namespaces[i].Path != netns {
			t.Errorf("BundleSpec(netns %q).Namespaces = %+v, want a network namespace at %q", netns, got.Linux.Namespaces, netns)
		}
	}
}

// TestRecoverDetachesOrphans: an attachment whose sandbox the driver does
// not know (a Start or Delete cut short) goes in Recover; a known
// sandbox's stays.
func TestRecoverDetachesOrphans(t *testing.T) {
	drivertest.RequireRoot(t)
	bin := findRuntime(t, oci.RuntimeRunc)
	dir := t.TempDir()
	t.Cleanup(func() { drivertest.UnmountUnder(t, dir) })
	nh := newNetHost(t, t.TempDir())
	d := newDriverNet(t, oci.RuntimeRunc, bin, dir, nh)
	ctx := t.Context()
	if _, err := nh.Attach(ctx, "orphan1", network.Limits{}); err != nil {
		t.Fatalf("Attach(orphan1) = %v", err)
	}
	if _, err := d.Recover(ctx); err != nil {
		t.Fatalf("Recover() = %v", err)
	}
	if nh.Attached("orphan1") {
		t.Errorf("Recover() left the attachment of unknown sandbox orphan1")
	}
	// Delete of an id known only by its attachment removes it.
	if _, err := nh.Attach(ctx, "orphan2", network.Limits{}); err != nil {
		t.Fatalf("Attach(orphan2) = %v", err)
	}
	if err := d.Delete(ctx, "orphan2"); err != nil {
		t.Errorf("Delete(orphan2) = %v, want it to remove the attachment", err)
	}
	if nh.Attached("orphan2") {
		t.Errorf("Delete(orphan2) left its attachment")
	}
}
