package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/hearth/hearth/instance"
	"github.com/hearth/hearth/network"
	"github.com/hearth/hearth/sandbox"
)

// openInstance claims the data dir's instance (package instance) in
// registry (empty: the host's). A data dir that holds a database but no
// record predates instances: while it has sandboxes, whose networks and
// cgroups carry the default instance's names, it is the default
// instance; with none left, it is named like a new one. It logs the
// instance's names; the daemon holds the claim until it stops.
func openInstance(cfg serveConfig, registry string, log *slog.Logger) (*instance.Instance, error) {
	_, dbErr := os.Stat(filepath.Join(cfg.dataDir, "hearth.db"))
	_, recErr := instance.Read(cfg.dataDir)
	inst, err := instance.Open(instance.Options{
		DataDir:  cfg.dataDir,
		Name:     cfg.instance,
		Legacy:   dbErr == nil && errors.Is(recErr, fs.ErrNotExist) && hasSandboxes(cfg.dataDir),
		Registry: registry,
	})
	if err != nil {
		return nil, err
	}
	if inst.Moved {
		log.Warn("this instance's slot was taken by another while it was away: its sandboxes get new addresses at their next start", "instance", inst.Instance, "slot", inst.Slot)
	}
	log.Info("instance", "name", inst.Instance, "slot", inst.Slot, "network", inst.Network, "link_prefix", inst.LinkPrefix, "subnet", inst.Subnet, "cgroup_parent", "/"+inst.CgroupParent)
	return inst, nil
}

// hasSandboxes reports whether data dir dir holds a sandbox of any
// runtime (the driver's directory of it) or a network attachment's
// address record; one it cannot read counts as holding one.
func hasSandboxes(dir string) bool {
	held, err := filepath.Glob(filepath.Join(dir, "oci", "*", "sandboxes", "*"))
	if err != nil || len(held) > 0 {
		return true
	}
	records, err := os.ReadDir(filepath.Join(dir, "network"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return true
	}
	for _, e := range records {
		if e.Type().IsRegular() {
			return true
		}
	}
	return false
}

// sandboxNet is the daemon's sandbox network: the network host (nil when
// this host cannot give sandboxes one) and the listeners of its DNS
// forwarder and egress gateway (nil when there is none, or it could not
// listen at its fixed port).
type sandboxNet struct {
	host    *network.Host
	dns     *network.DNSListener
	gateway net.Listener
}

// close closes the listeners, for a daemon that will not serve them.
func (n sandboxNet) close() {
	if n.dns != nil {
		n.dns.Close()
	}
	if n.gateway != nil {
		n.gateway.Close()
	}
}

// openNetwork makes inst's network host with opts (which it completes
// with inst's names and the ports), listening first for its DNS forwarder
// (when it serves names) and its egress gateway (see servePorts). Where
// this host cannot give sandboxes a network, it logs why and returns no
// host.
func openNetwork(ctx context.Context, cfg serveConfig, inst *instance.Instance, opts network.Options, log *slog.Logger) (sandboxNet, error) {
	var n sandboxNet
	dnsPort, gatewayPort := servePorts(cfg, inst)
	var err error
	if len(opts.DNSUpstreams) > 0 {
		if n.dns, err = listenFixed(dnsPort, "the DNS forwarder cannot listen: egress sandboxes' lookups fail", log,
			func(port int) (*network.DNSListener, error) { return network.ListenDNS(ctx, port) }); err != nil {
			return n, err
		}
		if n.dns != nil {
			dnsPort = n.dns.Port()
		}
	}
	if gatewayPort >= 0 {
		var lc net.ListenConfig
		if n.gateway, err = listenFixed(gatewayPort, "the egress gateway cannot listen: credential bindings do not work", log,
			func(port int) (net.Listener, error) {
				return lc.Listen(ctx, "tcp4", net.JoinHostPort("0.0.0.0", strconv.Itoa(port)))
			}); err != nil {
			n.close()
			return n, err
		}
		if n.gateway != nil {
			gatewayPort = n.gateway.Addr().(*net.TCPAddr).Port
		}
	}
	opts.Name, opts.LinkPrefix, opts.Subnet = inst.Network, inst.LinkPrefix, inst.Subnet
	opts.DNSPort, opts.GatewayPort = dnsPort, max(gatewayPort, 0)
	opts.GatewayDomain = sandbox.GatewayDomain
	n.host, err = network.New(opts)
	if errors.Is(err, network.ErrUnavailable) {
		log.Warn("sandboxes can have no network: egress is off", "err", err)
		n.close()
		return sandboxNet{}, nil
	}
	if err != nil {
		n.close()
		return sandboxNet{}, err
	}
	log.Info("sandbox network", "instance", inst.Instance, "subnet", inst.Subnet, "dns_port", opts.DNSPort, "dns", n.host.ServesDNS(), "gateway_port", opts.GatewayPort)
	return n, nil
}

// servePorts returns the ports the DNS forwarder and the egress gateway
// listen at, 0 for a port to pick: --dns-port and --gateway-port when
// given; else, for the default instance, the fixed 10053 and 10080 that
// hearth has always used; for any other, ports picked free at each start
// (two instances never share one, and the rules redirect to whatever was
// picked). A gateway port of -1 is no gateway (--gateway-port 0).
func servePorts(cfg serveConfig, inst *instance.Instance) (dnsPort, gatewayPort int) {
	dnsPort, gatewayPort = cfg.dnsPort, cfg.gatewayPort
	if dnsPort < 0 {
		dnsPort = 0
		if inst.Default() {
			dnsPort = network.DefaultDNSPort
		}
	}
	switch {
	case gatewayPort == 0:
		gatewayPort = -1
	case gatewayPort < 0:
		gatewayPort = 0
		if inst.Default() {
			gatewayPort = defaultGatewayPort
		}
	}
	return dnsPort, gatewayPort
}

// listenFixed listens at port with listen. Port 0 picks a free one, and
// failing to is an error; a fixed port that is taken is logged with
// msg and gives nil: the daemon runs without that service, its rules in
// place (sandboxes are refused at once), as before instances.
func listenFixed[L any](port int, msg string, log *slog.Logger, listen func(int) (L, error)) (L, error) {
	l, err := listen(port)
	if err == nil || port != 0 {
		if err != nil {
			log.Error(msg, "port", port, "err", err)
		}
		return l, nil
	}
	return l, fmt.Errorf("listen at a free port: %w", err)
}
