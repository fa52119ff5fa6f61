package oci_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
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

// netDNSPort is where the DNS forwarder of these tests listens: not a
// daemon's, nor the network package's tests'.
const netDNSPort = 10153

// openNetHost returns a network host on stateDir for the tests, serving
// DNS through upstreams when there are any.
func openNetHost(t testing.TB, stateDir string, upstreams ...netip.AddrPort) *network.Host {
	t.Helper()
	h, err := network.New(network.Options{
		Subnet:       netSubnet,
		StateDir:     stateDir,
		Name:         netName,
		LinkPrefix:   netPrefix,
		DNSUpstreams: upstreams,
		DNSPort:      netDNSPort,
		Logger:       testLogger(t),
	})
	if err != nil {
		t.Fatalf("network.New() = %v", err)
	}
	return h
}

// newNetHost is openNetHost, and in t's cleanup (which runs after that of
// sandboxes started later) it tears the host down and wants nothing of it
// left: no namespace, no link, no iptables rule.
func newNetHost(t testing.TB, stateDir string, upstreams ...netip.AddrPort) *network.Host {
	t.Helper()
	h := openNetHost(t, stateDir, upstreams...)
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
	// A bare run's flags are a sandbox's without a network, whole.
	for _, rt := range []string{oci.RuntimeRunsc, oci.RuntimeRunc, oci.RuntimeCrun} {
		want := append(oci.RuntimeFlags(rt), oci.NetworkFlags(rt, driver.NetworkNone)...)
		if got := oci.BareFlags(rt); !slices.Equal(got, want) {
			t.Errorf("BareFlags(%s) = %q, want %q", rt, got, want)
		}
	}
}

// TestBundleSpecNetns: an egress sandbox joins the attachment's namespace;
// any other gets a new one.
func TestBundleSpecNetns(t *testing.T) {
	spec := driver.Spec{ID: "x1", RootFS: "/r", AgentPath: "/a"}
	for _, netns := range []string{"", "/run/netns/hearth-x1"} {
		got := oci.BundleSpec(oci.RuntimeRunsc, spec, "/s", "hearth", netns, "", 0)
		i := slices.IndexFunc(got.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.NetworkNamespace })
		if i < 0 || got.Linux.Namespaces[i].Path != netns {
			t.Errorf("BundleSpec(netns %q).Namespaces = %+v, want a network namespace at %q", netns, got.Linux.Namespaces, netns)
		}
	}
}

// TestBundleSpecResolvConf: a resolv.conf given is bind-mounted read-only
// on /etc/resolv.conf; with none, nothing is mounted there.
func TestBundleSpecResolvConf(t *testing.T) {
	spec := driver.Spec{ID: "x1", RootFS: "/r", AgentPath: "/a"}
	for _, resolv := range []string{"", "/state/sandboxes/x1/resolv.conf"} {
		got := oci.BundleSpec(oci.RuntimeRunc, spec, "", "hearth", "/run/netns/hearth-x1", resolv, 0x70000000)
		var on []specs.Mount
		for _, m := range got.Mounts {
			if m.Destination == oci.ResolvConf {
				on = append(on, m)
			}
		}
		switch {
		case resolv == "" && len(on) != 0:
			t.Errorf("BundleSpec(no resolv.conf) mounts %+v on %s, want nothing", on, oci.ResolvConf)
		case resolv != "" && (len(on) != 1 || on[0].Source != resolv || on[0].Type != "bind" || !slices.Contains(on[0].Options, "ro")):
			t.Errorf("BundleSpec(resolv.conf %s) mounts %+v on %s, want it bound read-only", resolv, on, oci.ResolvConf)
		}
	}
}

// TestEnsureResolvConf: the mount point of the generated resolv.conf is
// the root's own regular file, made empty (with /etc) when missing, and
// refused when anything else: a symlink (resolved on the host), a
// directory, an /etc that is a symlink.
func TestEnsureResolvConf(t *testing.T) {
	root := t.TempDir()
	if err := oci.EnsureResolvConf(root); err != nil {
		t.Fatalf("EnsureResolvConf(no /etc) = %v", err)
	}
	path := filepath.Join(root, "etc", "resolv.conf")
	if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		t.Fatalf("made %s: %v, %v; want an empty regular file", path, fi, err)
	}
	if err := os.WriteFile(path, []byte("nameserver 192.0.2.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := oci.EnsureResolvConf(root); err != nil {
		t.Fatalf("EnsureResolvConf(a regular file) = %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "nameserver 192.0.2.1\n" {
		t.Errorf("EnsureResolvConf changed an existing file: %q", b)
	}
	link := t.TempDir()
	os.Mkdir(filepath.Join(link, "etc"), 0o755)
	if err := os.Symlink("/etc/hostname", filepath.Join(link, "etc", "resolv.conf")); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "etc", "resolv.conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	etcLink := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(etcLink, "etc")); err != nil {
		t.Fatal(err)
	}
	for what, r := range map[string]string{"a symlink": link, "a directory": dir, "an /etc symlink": etcLink} {
		if err := oci.EnsureResolvConf(r); err == nil {
			t.Errorf("EnsureResolvConf(%s) = nil, want an error", what)
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
	if _, err := nh.Attach(ctx, "orphan1", network.Limits{}, network.Egress{}); err != nil {
		t.Fatalf("Attach(orphan1) = %v", err)
	}
	if _, err := d.Recover(ctx); err != nil {
		t.Fatalf("Recover() = %v", err)
	}
	if nh.Attached("orphan1") {
		t.Errorf("Recover() left the attachment of unknown sandbox orphan1")
	}
	// Delete of an id known only by its attachment removes it.
	if _, err := nh.Attach(ctx, "orphan2", network.Limits{}, network.Egress{}); err != nil {
		t.Fatalf("Attach(orphan2) = %v", err)
	}
	if err := d.Delete(ctx, "orphan2"); err != nil {
		t.Errorf("Delete(orphan2) = %v, want it to remove the attachment", err)
	}
	if nh.Attached("orphan2") {
		t.Errorf("Delete(orphan2) left its attachment")
	}
}
