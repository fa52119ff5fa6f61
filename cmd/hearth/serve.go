package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hearth/hearth/audit"
	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/driver/oci"
	"github.com/hearth/hearth/httpapi"
	"github.com/hearth/hearth/image"
	"github.com/hearth/hearth/instance"
	"github.com/hearth/hearth/internal/hostusage"
	"github.com/hearth/hearth/layers"
	"github.com/hearth/hearth/layers/btrfs"
	"github.com/hearth/hearth/layers/overlay"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/mcpserver"
	"github.com/hearth/hearth/metrics"
	"github.com/hearth/hearth/network"
	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/rootfs"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/secrets"
	"github.com/hearth/hearth/spritesapi"
	"github.com/hearth/hearth/store"
	"github.com/hearth/hearth/store/postgres"
	"github.com/hearth/hearth/store/sqlite"
	"github.com/hearth/hearth/tracing"
	"github.com/hearth/hearth/webhook"
)

// serveConfig is what `hearth serve` runs with.
type serveConfig struct {
	dataDir    string
	listen     string
	runtime    string
	imageCache string
	agentPath  string
	layers     string
	layersSize int64
	maxWrite   int64
	defaultTTL time.Duration
	idle       time.Duration
	usageEvery time.Duration
	// sandboxMetrics adds each running sandbox's usage to /metrics.
	sandboxMetrics bool
	// otlpEndpoint is where traces go (package tracing); "": nowhere.
	otlpEndpoint string
	warmPool     map[string]int
	// tenantsFile declares tenants and agents, applied at every start;
	// baseDomain names sandbox URLs as hosts {port}-{name}.{baseDomain}.
	baseDomain string
	// alarmWebhook receives alarms.
	tenantsFile  string
	alarmWebhook string
	// auditRetention is how long the audit log keeps an event (0: for
	// ever).
	auditRetention time.Duration
	// dnsUpstreams are where egress sandboxes' DNS queries are forwarded
	// (--dns-upstream); none given means the host's resolv.conf's, and
	// dnsOff (--dns-upstream none) no name service.
	dnsUpstreams []netip.AddrPort
	dnsOff       bool
	// instance names the data dir's instance (--instance; empty: the
	// recorded or derived one, see package instance).
	instance string
	// gatewayPort is where the egress gateway listens (--gateway-port; 0:
	// no gateway) and dnsPort the DNS forwarder (--dns-port; 0: a free
	// port); -1 when not given (see servePorts).
	gatewayPort, dnsPort int
	// runtimeFlags are extra global flags of every runtime invocation
	// (--runtime-flag), e.g. runsc's --platform=kvm.
	runtimeFlags []string
	// maxConnections bounds each token's long-lived connections and MCP
	// sessions (--max-connections).
	maxConnections int
	// maxStarts bounds the heavy node calls running at once
	// (--max-concurrent-starts; 0: two per CPU).
	maxStarts int
	// storeURL is the Postgres database of --store (HEARTH_STORE), or ""
	// for the SQLite database in the data dir.
	storeURL string
	// maxExecs bounds the commands in their first moments at once
	// (--max-concurrent-execs; 0: two per CPU).
	maxExecs int
	// reservedCPUs are the CPUs kept from demoted sandboxes while others
	// are called (oci.Options.ReservedCPUs).
	reservedCPUs int
	// memoryReserve is the host memory a sandbox start leaves available
	// (--memory-reserve; oci.Options.MemoryReserve: 0 for the default,
	// negative for no check).
	memoryReserve int64
	// node names this daemon among those of one store (--node,
	// HEARTH_NODE; default: the host's name, see defaultNodeName), a DNS
	// label (sandbox.ValidateNodeName). Only the start line shows it yet.
	node string
	// keyFile is the deployment's sealing key (--key-file,
	// HEARTH_KEY_FILE), or "" for <data-dir>/secrets.key; see openSealer.
	keyFile string
	// advertise is where the store's other daemons reach this one
	// (--advertise, HEARTH_ADVERTISE; default: the --listen address, see
	// advertised).
	advertise string
	// kube is the Kubernetes cluster this daemon is part of, if any (see
	// kubeConfig).
	kube kubeConfig
}

// runServe runs the daemon until SIGINT or SIGTERM. Stopping it stops
// nothing else: sandboxes keep running and the next start adopts them.
func runServe(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseServe(args, env, stderr)
	if err != nil {
		return err
	}
	if cfg.kube.enabled() {
		if err := inKube("serve", args); err != nil {
			return err
		}
	}
	return serveDaemon(ctx, cfg, stdout, stderr)
}

// serveDaemon runs the daemon cfg describes (serve's or node's) until
// SIGINT or SIGTERM.
func serveDaemon(ctx context.Context, cfg serveConfig, stdout, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	inst, db, where, err := openDataDir(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer inst.Close()
	defer db.Close()
	box, err := openSealer(cfg, log)
	if err != nil {
		return err
	}
	defer startTracing(ctx, cfg, log)()
	// Metrics come first: the network host counts refusals.
	reg := metrics.NewRegistry()
	host, err := openSandboxHost(ctx, &cfg, inst, db, box, reg, stderr, log)
	if err != nil {
		return err
	}
	defer host.close()
	// The API's socket first: the node's address goes into the store
	// before anything is served, and calls wait in its backlog until then.
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("%w (another daemon's API? two daemons on one host need different --listen addresses)", err)
	}
	defer ln.Close()
	member, err := joinCluster(ctx, cfg, db, inst.Instance, ln, log)
	if err != nil {
		return err
	}
	rec, closeAudit := startAudit(ctx, cfg, db, member.Leading, log.With("component", "audit"))
	defer closeAudit()
	opts := lifecycle.Options{
		Store:               db,
		Node:                host.node,
		NodeName:            cfg.node,
		Instance:            inst.Instance,
		NodeDown:            member.Down,
		StoreWide:           member.Leading,
		MaxWriteBytes:       cfg.maxWrite,
		DefaultTTL:          cfg.defaultTTL,
		IdleTimeout:         cfg.idle,
		UsageInterval:       cfg.usageEvery,
		WarmPool:            cfg.warmPool,
		MaxConcurrentStarts: cfg.maxStarts,
		MaxConcurrentExecs:  cfg.maxExecs,
		Alarms:              alarmSink(cfg, reg, rec, log),
		Secrets:             box,
		Logger:              log.With("component", "lifecycle"),
	}
	var svc *lifecycle.Service
	fwd := forwarding(cfg, member, where, &opts, func() *lifecycle.Service { return svc })
	finishKube, err := kubeWiring(cfg, &opts, stderr, log)
	if err != nil {
		return err
	}
	if svc, err = lifecycle.New(opts); err != nil {
		return err
	}
	if host.defImage != nil {
		if err := svc.Images.SetDefault(ctx, *host.defImage); err != nil {
			return err
		}
	}
	if err := startService(ctx, cfg, svc, host.nets, reg, stdout, log); err != nil {
		return err
	}
	go member.Run(ctx)
	go svc.Run(ctx)
	finishKube(ctx, svc, rec, member.Address())
	fmt.Fprintf(stdout, "hearth: listening on http://%s (node %s, runtime %s, data %s, instance %s, store %s)\n", ln.Addr(), cfg.node, cfg.runtime, cfg.dataDir, inst.Instance, where)
	return serveAPI(ctx, ln, apiHandler(cfg, svc, db, newDoorCluster(member, where, fwd, opts.Fleet), rec, reg, log), log)
}

// sandboxHost is what runs a daemon's sandboxes: the sandbox network, the
// node, and the default image's version, which the node holds.
type sandboxHost struct {
	nets sandboxNet
	node node.Node
	// defImage is nil on a control plane on Kubernetes, whose node is
	// node.None: its nodes record the default image.
	defImage *sandbox.Image
	close    func()
}

// openSandboxHost opens cfg's sandbox host: the runtime (cfg.runtime
// detected when not given), the sandbox network and the node (see
// openNode), or, for a control plane on Kubernetes, node.None with its
// fleet's capabilities, and nothing else.
func openSandboxHost(ctx context.Context, cfg *serveConfig, inst *instance.Instance, db store.Store, box *secrets.Box, reg *metrics.Registry, stderr io.Writer, log *slog.Logger) (sandboxHost, error) {
	if cfg.kube.role == kubeControlPlane {
		none := controlPlaneNode(*cfg)
		cfg.runtime = none.Caps.Runtime
		return sandboxHost{node: none, close: func() {}}, nil
	}
	var err error
	if cfg.runtime == "" {
		if cfg.runtime, err = oci.Detect(exec.LookPath); err != nil {
			return sandboxHost{}, err
		}
	}
	nets, err := openSandboxNetwork(ctx, *cfg, inst, db, reg, log)
	if err != nil {
		return sandboxHost{}, err
	}
	local, def, closeNode, err := openNode(ctx, *cfg, inst, nets, box, stderr, log)
	if err != nil {
		nets.close()
		return sandboxHost{}, err
	}
	return sandboxHost{nets: nets, node: local, defImage: &def, close: func() { closeNode(); nets.close() }}, nil
}

// openNode builds this host's node (see package node): the OCI runtime
// driver, the layer store with the default image's version in it (def),
// the image store over it (what pulls download and imports spool waits in
// <data>/spool), and the host's memory reader; closeNode closes the layer
// store. The driver demotes CPU-saturating sandboxes until ctx ends
// (oci.Driver.QuietNeighbours).
func openNode(ctx context.Context, cfg serveConfig, inst *instance.Instance, nets sandboxNet, box *secrets.Box, stderr io.Writer, log *slog.Logger) (local *node.Local, def sandbox.Image, closeNode func(), err error) {
	drv, err := newDriver(cfg, inst, nets, box, log)
	if err != nil {
		return nil, def, nil, err
	}
	go drv.QuietNeighbours(ctx)
	snaps, err := openLayers(ctx, cfg, log.With("component", "layers"))
	if err != nil {
		return nil, def, nil, err
	}
	fail := func(err error) (*node.Local, sandbox.Image, func(), error) {
		snaps.Close()
		return nil, sandbox.Image{}, nil, err
	}
	if def, err = ensureImage(ctx, snaps, cfg, stderr, log); err != nil {
		return fail(err)
	}
	images, err := image.New(image.Options{Layers: snaps, Logger: log.With("component", "images")})
	if err != nil {
		return fail(err)
	}
	imageDir := filepath.Join(cfg.dataDir, "spool")
	if err := os.MkdirAll(imageDir, 0o700); err != nil {
		return fail(err)
	}
	local, err = node.NewLocal(node.Options{
		Driver:    drv,
		Layers:    snaps,
		AgentPath: cfg.agentPath,
		MemInfo:   hostMemory,
		Meter:     oci.MeterOf(drv),
		Images:    images,
		ImageDir:  imageDir,
		Logger:    log.With("component", "node"),
	})
	if err != nil {
		return fail(err)
	}
	return local, def, func() { snaps.Close() }, nil
}

// hostMemory is the host's available and total memory in bytes, what the
// sandboxes of this daemon's node share (node.Options.MemInfo).
func hostMemory() (available, total int64, err error) {
	m, err := hostusage.ReadMemory(hostusage.Proc)
	return m.Available, m.Total, err
}

// runningPatience is how long a start waits for a data dir that another
// daemon seems to run, before it says so.
const runningPatience = 15 * time.Second

// openDataDir creates the data dir if missing and opens its instance and
// the store, in this order: the database's file tells a data dir made
// before instances. where names the store for the start line.
func openDataDir(ctx context.Context, cfg serveConfig, log *slog.Logger) (inst *instance.Instance, db store.Store, where string, err error) {
	if err := os.MkdirAll(cfg.dataDir, 0o700); err != nil {
		return nil, nil, "", err
	}
	inst, err = openInstance(cfg, "", log)
	// A daemon killed a moment ago (a crash, a supervisor's restart) may
	// hold its claim on the data dir until the kernel has let go of all
	// it had open: wait a little before saying another runs.
	for deadline := time.Now().Add(runningPatience); errors.Is(err, instance.ErrRunning) && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return nil, nil, "", err
		case <-time.After(250 * time.Millisecond):
		}
		inst, err = openInstance(cfg, "", log)
	}
	if err != nil {
		return nil, nil, "", err
	}
	db, where, err = openStore(ctx, cfg, log)
	if err != nil {
		inst.Close()
		return nil, nil, "", err
	}
	return inst, db, where, nil
}

// openStore opens the store cfg names: the SQLite database in the data
// dir by default, or the Postgres database of --store, which other
// daemons may share (see package cluster).
func openStore(ctx context.Context, cfg serveConfig, log *slog.Logger) (store.Store, string, error) {
	if cfg.storeURL == "" {
		file := filepath.Join(cfg.dataDir, "hearth.db")
		db, err := sqlite.Open(ctx, file, nil)
		return db, "sqlite " + file, err
	}
	db, err := postgres.Open(ctx, cfg.storeURL, &postgres.Options{Logger: log.With("component", "store")})
	if err != nil {
		return nil, "", err
	}
	return db, "postgres " + db.Where(), nil
}

// openSealer opens the key that seals tenants' secrets and the keys of
// sandboxes' memory images. With --key-file it is that file, which must
// exist: every daemon of one store is given the same file, made once by
// `hearth key create`, and a daemon never makes one of its own there.
// Without, it is <data-dir>/secrets.key, made at the first start; on a
// Postgres store that is logged as a warning, because a key made in one
// daemon's data dir cannot open what another daemon of the store sealed.
func openSealer(cfg serveConfig, log *slog.Logger) (*secrets.Box, error) {
	if cfg.keyFile == "" {
		if cfg.storeURL != "" {
			log.Warn("no --key-file on a Postgres store: this daemon seals with the key of its own data dir, which no other daemon of the store has; "+
				"give every daemon of one store the same key with --key-file (make it with hearth key create FILE)",
				"key", filepath.Join(cfg.dataDir, "secrets.key"))
		}
		return secrets.LoadOrCreate(filepath.Join(cfg.dataDir, "secrets.key"))
	}
	box, err := secrets.Load(cfg.keyFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, sandbox.Errorf(sandbox.CodeFailedPrecondition, "--key-file %s: no such file", cfg.keyFile).
			WithHint("make one with `hearth key create %s`, or name the key file the store's other daemons use", cfg.keyFile)
	case errors.Is(err, secrets.ErrMalformedKey):
		return nil, sandbox.Errorf(sandbox.CodeFailedPrecondition, "--key-file %s: %v", cfg.keyFile, err).
			WithHint("name the key file the store's other daemons use, or make one with `hearth key create %s`", cfg.keyFile)
	case err != nil:
		return nil, fmt.Errorf("--key-file %s: %w", cfg.keyFile, err)
	}
	return box, nil
}

// newDriver is the OCI runtime driver of cfg's runtime, its state under
// the data dir, its sandboxes' cgroups under the instance's parent and
// their networks on nets' host (none without one); box seals the keys of
// their memory images.
func newDriver(cfg serveConfig, inst *instance.Instance, nets sandboxNet, box *secrets.Box, log *slog.Logger) (*oci.Driver, error) {
	return oci.New(oci.Options{
		Runtime:       cfg.runtime,
		StateDir:      filepath.Join(cfg.dataDir, "oci", cfg.runtime),
		CgroupParent:  inst.CgroupParent,
		RuntimeFlags:  cfg.runtimeFlags,
		ReservedCPUs:  cfg.reservedCPUs,
		MemoryReserve: cfg.memoryReserve,
		Network:       nets.host,
		Sealer:        box,
		Logger:        log.With("component", "driver"),
	})
}

// openSandboxNetwork opens the network host that gives sandboxes egress,
// when this host can: without it sandboxes get no network, and an egress
// one is refused. The host's own LAN is denied to sandboxes (public
// addresses or not), and their DNS queries go to cfg's name servers, by
// default the host's own. Refusals are logged and counted in reg.
func openSandboxNetwork(ctx context.Context, cfg serveConfig, inst *instance.Instance, db store.Store, reg *metrics.Registry, log *slog.Logger) (sandboxNet, error) {
	uplink, err := network.UplinkNetworks()
	if err != nil {
		log.Warn("cannot read the host's uplink networks; sandboxes with egress may reach its LAN", "err", err)
	}
	dnsUpstreams := cfg.dnsUpstreams
	if !cfg.dnsOff && len(dnsUpstreams) == 0 {
		if b, err := os.ReadFile("/etc/resolv.conf"); err != nil {
			log.Warn("cannot read the host's name servers: sandboxes get no name service", "err", err)
		} else if dnsUpstreams = network.Nameservers(b); len(dnsUpstreams) == 0 {
			log.Warn("the host's /etc/resolv.conf names no name server: sandboxes get no name service")
		}
	}
	return openNetwork(ctx, cfg, inst, network.Options{
		StateDir:     filepath.Join(cfg.dataDir, "network"),
		Deny:         uplink,
		DNSUpstreams: dnsUpstreams,
		OnRefusal:    egressRefusals(db, reg, log.With("component", "network")),
		Logger:       log.With("component", "network"),
	}, log)
}

// startAudit returns the audit recorder over db, and the function that
// closes it, flushing what waits (at most 5 s): the daemon calls it after
// its server has shut down and before the store closes. With a retention,
// old events are pruned until ctx ends.
func startAudit(ctx context.Context, cfg serveConfig, db store.Store, leading func() bool, log *slog.Logger) (*audit.Recorder, func()) {
	if cfg.auditRetention > 0 {
		go pruneAudit(ctx, db, cfg.auditRetention, leading, log)
	}
	rec := audit.New(db.Audit(), log)
	return rec, func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := rec.Close(cctx); err != nil {
			log.Error("audit events lost at shutdown", "err", err)
		}
	}
}

// alarmSink is where alarms go: audited in rec, counted for /metrics,
// and posted to the webhook if cfg names one.
func alarmSink(cfg serveConfig, reg *metrics.Registry, rec *audit.Recorder, log *slog.Logger) func(sandbox.Alarm) {
	count := door.CountAlarms(reg)
	alarms := func(a sandbox.Alarm) { count(a); rec.Record(alarmEvent(a)) }
	if cfg.alarmWebhook != "" {
		local, post := alarms, webhook.New(cfg.alarmWebhook, log.With("component", "webhook")).Post
		alarms = func(a sandbox.Alarm) { local(a); post(a) }
	}
	return alarms
}

// startService readies svc to serve: it starts the sandbox network's
// services, reconciles with the runtime, applies the tenants file and
// makes sure of the operator token, whose file it prints, or that the
// store holds one (a Postgres store another daemon made it in; see
// lifecycle.Tenancy.EnsureOperatorToken).
func startService(ctx context.Context, cfg serveConfig, svc *lifecycle.Service, nets sandboxNet, reg *metrics.Registry, stdout io.Writer, log *slog.Logger) error {
	if nets.host != nil {
		startNetwork(ctx, nets, svc, reg, log)
	}
	if cfg.sandboxMetrics {
		sandboxMetrics(reg, svc.Usage)
	}
	if err := svc.Recover(ctx); err != nil {
		return fmt.Errorf("reconcile with the runtime: %w", err)
	}
	if cfg.tenantsFile != "" {
		if err := applyTenantsFile(ctx, svc, cfg.tenantsFile); err != nil {
			return fmt.Errorf("tenants file %s: %w", cfg.tenantsFile, err)
		}
	}
	tokenFile := filepath.Join(cfg.dataDir, "operator.token")
	err := ensureOperatorToken(ctx, svc, tokenFile, cfg.storeURL != "")
	switch {
	case errors.Is(err, lifecycle.ErrOperatorTokenHeld):
		fmt.Fprintln(stdout, "hearth: operator token held by the store: mint one with hearth token create --operator")
	case err != nil:
		return err
	default:
		fmt.Fprintf(stdout, "hearth: operator token in %s\n", tokenFile)
	}
	return nil
}

// startTracing sends the daemon's traces to cfg's OTLP endpoint, when it
// has one, and returns what flushes and stops them (a bad endpoint was
// refused with the flags).
func startTracing(ctx context.Context, cfg serveConfig, log *slog.Logger) func() {
	if cfg.otlpEndpoint == "" {
		return func() {}
	}
	shutdown, err := tracing.Start(ctx, tracing.Options{Endpoint: cfg.otlpEndpoint, Node: cfg.node, Version: version(), Logger: log.With("component", "tracing")})
	if err != nil {
		log.Error("traces are not sent", "err", err)
		return func() {}
	}
	log.Info("sending traces", "endpoint", cfg.otlpEndpoint)
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			log.Warn("flush the last traces", "err", err)
		}
	}
}

// sandboxMetrics registers in reg the latest usage sample of each running
// sandbox of usage's node, as gauges labelled by tenant and sandbox.
func sandboxMetrics(reg *metrics.Registry, usage *lifecycle.Usage) {
	labels := []string{"tenant", "sandbox"}
	gauge := func(name, help string, value func(lifecycle.LatestUsage) float64) {
		reg.GaugeFunc(name, help, labels, func() ([]metrics.Sample, error) {
			latest := usage.Latest()
			out := make([]metrics.Sample, 0, len(latest))
			for _, u := range latest {
				out = append(out, metrics.Sample{Labels: []string{u.Tenant, u.Name}, Value: value(u)})
			}
			return out, nil
		})
	}
	gauge("hearth_sandbox_cpu_seconds", "CPU time a running sandbox used since it started, at its latest sample.", func(u lifecycle.LatestUsage) float64 { return u.CPUSeconds })
	gauge("hearth_sandbox_cpu_cores", "CPU a running sandbox used per second between its last two samples (1: one core).", func(u lifecycle.LatestUsage) float64 { return u.CPUCores })
	gauge("hearth_sandbox_memory_bytes", "Memory charged to a running sandbox, at its latest sample.", func(u lifecycle.LatestUsage) float64 { return float64(u.MemoryBytes) })
	gauge("hearth_sandbox_memory_working_set_bytes", "A running sandbox's memory less its inactive file cache, at its latest sample.", func(u lifecycle.LatestUsage) float64 { return float64(u.MemoryWorkingSetBytes) })
	gauge("hearth_sandbox_network_receive_bytes", "Bytes a running sandbox received since it started, at its latest sample.", func(u lifecycle.LatestUsage) float64 { return float64(u.NetRxBytes) })
	gauge("hearth_sandbox_network_transmit_bytes", "Bytes a running sandbox sent since it started, at its latest sample.", func(u lifecycle.LatestUsage) float64 { return float64(u.NetTxBytes) })
}

// apiHandler is the daemon's doors side by side on the door chain: the
// native API, MCP at /mcp and the Sprites-compatible API at /v1/sprites.
// The chain authenticates, audits and counts the calls of all three.
func apiHandler(cfg serveConfig, svc *lifecycle.Service, db store.Store, nodes doorCluster, rec *audit.Recorder, reg *metrics.Registry, log *slog.Logger) http.Handler {
	opts := door.Options{
		Logger:         log.With("component", "http"),
		Audit:          rec,
		Metrics:        reg,
		Counts:         svc.Sandboxes.Counts,
		MaxConnections: cfg.maxConnections,
	}
	if nodes.fwd != nil {
		opts.Forward, opts.ImageNode = nodes.fwd, nodes.imageNode
	}
	chain := door.New(svc.Tenancy, svc.Sandboxes, opts)
	native := httpapi.New(svc, httpapi.Options{
		Logger:     log.With("component", "http"),
		Audit:      rec,
		AuditLog:   db.Audit(),
		Metrics:    reg,
		BaseDomain: cfg.baseDomain,
		BuildDir:   filepath.Join(cfg.dataDir, "spool"),
		Cluster:    nodes.health,
	})
	mcp := mcpserver.New(svc, mcpserver.Options{
		Logger:      log.With("component", "mcp"),
		Version:     version(),
		Audit:       rec,
		MaxSessions: cfg.maxConnections,
		Forward:     mcpForwarder(nodes.fwd),
		ImageNode:   nodes.imageNode,
	})
	sprites := spritesapi.New(spritesapi.Service{Sandboxes: svc.Sandboxes, Processes: svc.Processes, Files: svc.Files,
		Checkpoints: svc.Checkpoints, Tenancy: svc.Tenancy}, spritesapi.Options{
		Logger: log.With("component", "sprites"), BaseDomain: cfg.baseDomain})
	return chain.Handler(native, mcp.Door(), sprites)
}

// serveAPI serves h on ln until ctx ends, then shuts the server down,
// giving requests in flight 5 s; it returns the server's error if it
// stops first.
func serveAPI(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down; sandboxes keep running")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	return nil
}

// startNetwork runs, each in a goroutine of its own until ctx ends, the
// network host's DNS forwarder, its watch of refused connections, its
// guard of the firewall rules and the egress gateway, on the listeners
// of nets; one that cannot run is logged, not fatal.
func startNetwork(ctx context.Context, nets sandboxNet, svc *lifecycle.Service, reg *metrics.Registry, log *slog.Logger) {
	netHost := nets.host
	if nets.dns != nil {
		go func() {
			if err := netHost.ServeDNSOn(ctx, nets.dns); err != nil {
				log.Error("the DNS forwarder is not running: egress sandboxes resolve no names", "err", err)
			}
		}()
	}
	go func() {
		if err := netHost.WatchRefusals(ctx); err != nil {
			log.Error("refused connections of sandboxes are not logged", "err", err)
		}
	}()
	go netHost.Guard(ctx, network.DefaultGuardInterval)
	if nets.gateway != nil {
		go func() {
			if err := serveGateway(ctx, nets.gateway, netHost, svc, reg, log.With("component", "gateway")); err != nil {
				log.Error("the egress gateway is not running: credential bindings do not work", "err", err)
			}
		}()
	}
}

func parseServe(args []string, env func(string) string, stderr io.Writer) (serveConfig, error) {
	fl := flag.NewFlagSet("hearth serve", flag.ContinueOnError)
	fl.SetOutput(stderr)
	cfg := serveConfig{gatewayPort: -1, dnsPort: -1}
	serveFlags(fl, &cfg, env)
	fl.StringVar(&cfg.node, "node", env("HEARTH_NODE"), "`NAME` of this daemon among those of one store: 1 to 63 lowercase letters, digits and '-' (default: the host name, lower-cased, other characters made '-')")
	kubeFlags(fl, &cfg, env, "the Kubernetes cluster whose hearth nodes run this control plane's sandboxes, as Pods (see docs/KUBERNETES.md); without it, this daemon runs them itself")
	if err := parseDaemonFlags(fl, "serve", args); err != nil {
		return cfg, err
	}
	if cfg.kube.enabled() {
		cfg.kube.role = kubeControlPlane
		if cfg.storeURL == "" {
			return cfg, &usageError{verb: "serve", msg: "--kubeconfig: a control plane on Kubernetes needs the Postgres store its nodes share (--store postgres://…)"}
		}
	}
	return cfg, finishServe(&cfg)
}

// parseDaemonFlags parses a daemon verb's flags, which take no
// positional argument: -h is flag.ErrHelp, anything else wrong a usage
// error of verb.
func parseDaemonFlags(fl *flag.FlagSet, verb string, args []string) error {
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{verb: verb, msg: err.Error()}
	}
	if fl.NArg() > 0 {
		return &usageError{verb: verb, msg: fmt.Sprintf("unexpected arguments %q", fl.Args())}
	}
	return nil
}

// serveFlags defines on fl the flags that `hearth serve` and `hearth
// node` share: those of a daemon that runs sandboxes.
func serveFlags(fl *flag.FlagSet, cfg *serveConfig, env func(string) string) {
	fl.StringVar(&cfg.dataDir, "data-dir", orDefault(env("HEARTH_DATA_DIR"), "/var/lib/hearth"), "state, layers and the operator token")
	fl.StringVar(&cfg.listen, "listen", "127.0.0.1:7077", "address of the HTTP API")
	fl.StringVar(&cfg.runtime, "runtime", "", "OCI runtime: runsc, runc or crun (default: runsc when present)")
	fl.Func("runtime-flag", "extra global `FLAG` of every invocation of the OCI runtime, after hearth's own (repeatable): e.g. --platform=kvm for runsc on a host whose KVM runs gVisor, or --debug-log=/tmp/runsc/", func(v string) error {
		if !strings.HasPrefix(v, "-") {
			return fmt.Errorf("%q is not a flag (write it as --name=value)", v)
		}
		cfg.runtimeFlags = append(cfg.runtimeFlags, v)
		return nil
	})
	fl.StringVar(&cfg.storeURL, "store", env("HEARTH_STORE"), "the control plane's database: a `postgres://USER[:PASS]@HOST:PORT/DB?sslmode=…` URL, which other daemons may share (default: SQLite in the data dir)")
	fl.StringVar(&cfg.keyFile, "key-file", env("HEARTH_KEY_FILE"), "the deployment's sealing key `FILE`, made by 'hearth key create FILE'; every daemon of one store needs the same (default: <data-dir>/secrets.key, made at the first start)")
	fl.StringVar(&cfg.advertise, "advertise", env("HEARTH_ADVERTISE"), "`HOST:PORT` where the other daemons of a shared store reach this one's API (default: the --listen address; the host's name when that is every address)")
	fl.StringVar(&cfg.imageCache, "image-cache", env("HEARTH_IMAGE_CACHE"), "where built images are cached (default: <data-dir>/images)")
	fl.StringVar(&cfg.agentPath, "agent", "", "path of the static hearth-agent binary (default: beside hearth, then PATH)")
	fl.StringVar(&cfg.layers, "layers", "auto", "layer store: btrfs (snapshots in O(1)), overlay (the slower fallback for kernels without btrfs; no disk limits), or auto: btrfs when the kernel has it")
	fl.Int64Var(&cfg.layersSize, "layers-size", 64<<30, "size in bytes of the sparse btrfs file backing the layer store when the data dir is not btrfs")
	fl.Int64Var(&cfg.maxWrite, "max-write-bytes", lifecycle.DefaultMaxWriteBytes, "largest file write accepted")
	fl.IntVar(&cfg.maxConnections, "max-connections", door.DefaultMaxConnections, "most long-lived connections one token holds at once (exec streams, file transfers, proxied requests, MCP requests), and most MCP sessions; one more is refused with rate_limited")
	fl.IntVar(&cfg.maxStarts, "max-concurrent-starts", 0, "most sandbox starts (creates, forks, wakes, restores), memory checkpoints and image pulls running at once; the others queue, fairly across tenants (0: two per CPU)")
	fl.IntVar(&cfg.maxExecs, "max-concurrent-execs", 0, "most commands starting at once (each counts for its first 200 ms at most); the others queue, fairly across tenants (0: two per CPU)")
	fl.IntVar(&cfg.reservedCPUs, "reserved-cpus", 1, "CPUs kept free of CPU-saturating (demoted) sandboxes while other sandboxes are called, for those calls' round trips; the demoted get them back 2 s after the last such call (0: none; at most all CPUs but one are kept)")
	fl.Int64Var(&cfg.memoryReserve, "memory-reserve", 0, "bytes of the host's available memory (MemAvailable) that sandbox starts leave free: a create, wake, restore or fork is refused (unavailable) while less than this and a start's 64 MiB is available (0: a twentieth of the host's memory, at least 256 MiB and at most 2 GiB; -1: no such check)")
	fl.DurationVar(&cfg.defaultTTL, "default-ttl", lifecycle.DefaultTTL, "lifetime of a sandbox whose create names none (also the cap)")
	fl.Func("warm-pool", "sandboxes of the default image to keep started ahead of time, per size: small=2,medium=1", func(v string) error {
		pool, err := parseWarmPool(v)
		cfg.warmPool = pool
		return err
	})
	fl.StringVar(&cfg.tenantsFile, "tenants", "", "JSON `file` of tenants (allocation, policy) and agents to create or update at start (see docs/TENANCY.md)")
	fl.StringVar(&cfg.baseDomain, "base-domain", "", "serve each sandbox port at the host {port}-{name}.`DOMAIN` too (point a wildcard DNS name at the daemon)")
	fl.StringVar(&cfg.alarmWebhook, "alarm-webhook", "", "`URL` that receives every create-rate alarm and breaker trip as a JSON POST")
	fl.DurationVar(&cfg.idle, "idle-timeout", lifecycle.DefaultIdleTimeout, "how long a sandbox with no command and no call stays awake before it sleeps")
	fl.Func("otlp-endpoint", "send traces of the API's calls (through lifecycle to the runtime and the agent) to the OpenTelemetry collector at `URL` over OTLP/HTTP, e.g. http://127.0.0.1:4318 (default: none)", func(v string) error {
		if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("want an http:// or https:// URL of an OTLP/HTTP collector")
		}
		cfg.otlpEndpoint = v
		return nil
	})
	fl.BoolVar(&cfg.sandboxMetrics, "sandbox-metrics", false, "add each running sandbox's CPU, memory and network use to /metrics, labelled by tenant and sandbox (one series per sandbox and figure: mind your metrics store)")
	fl.DurationVar(&cfg.usageEvery, "usage-interval", 10*time.Second, "how often each running sandbox's CPU, memory and network use is sampled (kept an hour, in memory; negative: never)")
	fl.StringVar(&cfg.instance, "instance", "", "`NAME` of this data dir's instance, which names its networks and cgroups apart from other daemons' on this host: 1 to 9 lowercase letters and digits, given at its first start (default: hearth for /var/lib/hearth, else one derived from the data dir)")
	fl.Func("gateway-port", "`PORT` of the egress gateway, where sandboxes reach credential bindings at http://NAME."+sandbox.GatewayDomain+" (default: 10080 for the default instance, a free port for others; 0: no gateway)", portFlag(&cfg.gatewayPort))
	fl.Func("dns-port", "`PORT` of the DNS forwarder egress sandboxes' lookups are redirected to (default: 10053 for the default instance, a free port for others)", portFlag(&cfg.dnsPort))
	fl.Func("dns-upstream", "name server `ADDR[:PORT]` that egress sandboxes' DNS queries are forwarded to (repeatable or comma-separated; default: the nameservers of the host's /etc/resolv.conf; none: no name service)", dnsUpstreamFlag(cfg))
	fl.DurationVar(&cfg.auditRetention, "audit-retention", 720*time.Hour, "how long the audit log keeps an event; older ones are deleted at start and daily (0: keep every event)")
}

// finishServe checks what the flags of serve gave cfg and fills in the
// defaults that depend on others or on the host.
func finishServe(cfg *serveConfig) error {
	if cfg.maxConnections < 1 {
		return &usageError{verb: "serve", msg: fmt.Sprintf("--max-connections %d: give at least 1", cfg.maxConnections)}
	}
	if cfg.maxStarts < 0 {
		return &usageError{verb: "serve", msg: fmt.Sprintf("--max-concurrent-starts %d: give at least 1, or 0 for two per CPU", cfg.maxStarts)}
	}
	if u := cfg.storeURL; u != "" && !strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
		return &usageError{verb: "serve", msg: "--store: want a postgres:// URL (postgres://USER[:PASS]@HOST:PORT/DB?sslmode=…), or none for SQLite in the data dir"}
	}
	if cfg.reservedCPUs < 0 {
		return &usageError{verb: "serve", msg: fmt.Sprintf("--reserved-cpus %d: give 0 for none, or how many", cfg.reservedCPUs)}
	}
	if cfg.memoryReserve < -1 {
		return &usageError{verb: "serve", msg: fmt.Sprintf("--memory-reserve %d: give bytes, 0 for the default, or -1 for no check", cfg.memoryReserve)}
	}
	if cfg.maxExecs < 0 {
		return &usageError{verb: "serve", msg: fmt.Sprintf("--max-concurrent-execs %d: give at least 1, or 0 for two per CPU", cfg.maxExecs)}
	}
	if cfg.node == "" {
		host, _ := os.Hostname() // none: the default of defaultNodeName
		cfg.node = defaultNodeName(host)
	} else if err := sandbox.ValidateNodeName(cfg.node); err != nil {
		return &usageError{verb: "serve", msg: "--node: " + err.Error()}
	}
	if cfg.imageCache == "" {
		cfg.imageCache = filepath.Join(cfg.dataDir, "images")
	}
	if cfg.agentPath == "" {
		var err error
		if cfg.agentPath, err = findBeside("hearth-agent"); err != nil {
			return errors.New("hearth-agent not found beside hearth or in PATH; build it with `CGO_ENABLED=0 go build ./cmd/hearth-agent` or pass --agent")
		}
	}
	return nil
}

// defaultNodeName is the node name of a host called host: lower-cased,
// each character outside [a-z0-9-] made '-', at most 63 characters, with
// no '-' at either end; "node" when nothing is left. A full name is kept
// whole ("web1.example.com" is "web1-example-com"), so that hosts of one
// deployment that differ only in their domain stay apart.
func defaultNodeName(host string) string {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, strings.ToLower(host))
	name = strings.Trim(name, "-")
	if len(name) > sandbox.MaxNameLen { // bytes are characters now: all ASCII
		name = strings.TrimRight(name[:sandbox.MaxNameLen], "-")
	}
	if name == "" {
		return "node"
	}
	return name
}

// dnsUpstreamFlag parses --dns-upstream into cfg: name servers, comma
// separated, or none (no name service, and then no name server).
func dnsUpstreamFlag(cfg *serveConfig) func(string) error {
	return func(v string) error {
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimSpace(s)
			if s == "none" {
				cfg.dnsOff = true
				continue
			}
			ap, err := network.ParseUpstream(s)
			if err != nil {
				return err
			}
			cfg.dnsUpstreams = append(cfg.dnsUpstreams, ap)
		}
		if cfg.dnsOff && len(cfg.dnsUpstreams) > 0 {
			return errors.New("none turns DNS off: give no name server with it")
		}
		return nil
	}
}

// parseWarmPool parses --warm-pool: comma-separated size=count pairs.
func parseWarmPool(v string) (map[string]int, error) {
	pool := map[string]int{}
	for pair := range strings.SplitSeq(v, ",") {
		size, count, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok {
			return nil, fmt.Errorf("%q is not size=count", pair)
		}
		if _, err := sandbox.LookupSize(size); err != nil {
			return nil, err
		}
		n, err := strconv.Atoi(count)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q: the count must be a whole number", pair)
		}
		pool[size] = n
	}
	return pool, nil
}

// findBeside looks for the executable name beside this one, then in PATH.
func findBeside(name string) (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", err
	}
	return filepath.Abs(p)
}

// defaultImage is the name of the image create uses when none is named.
const defaultImage = "default"

// ensureImage builds (once, cached) and imports the default image's
// version of this recipe, and returns it: its digest is the recipe's
// (rootfs.Version), so that a new recipe is a new version, which new
// sandboxes use while the old one stays for the sandboxes made from it.
func ensureImage(ctx context.Context, snaps layers.Store, cfg serveConfig, progress io.Writer, log *slog.Logger) (sandbox.Image, error) {
	sum := sha256.Sum256([]byte(rootfs.Version(rootfs.Options{})))
	digest := "sha256:" + hex.EncodeToString(sum[:])
	key, err := image.TopKey(digest)
	if err != nil {
		return sandbox.Image{}, err
	}
	img := sandbox.Image{Digest: digest, Layers: []string{key}, Config: node.DefaultConfig}
	if _, err := snaps.Stat(ctx, key); err != nil {
		fmt.Fprintf(progress, "hearth: preparing the default image in %s (first start of this version)\n", cfg.imageCache)
		rootDir, err := buildDefaultImage(ctx, cfg.imageCache, progress, log)
		if err != nil {
			return img, fmt.Errorf("build the default image: %w", err)
		}
		if err := rootfs.Import(ctx, snaps, key, rootDir); err != nil {
			return img, err
		}
	}
	if n, err := snaps.Usage(ctx, key); err == nil {
		img.Size = n
	}
	return img, nil
}

// alarmEvent is the audit event of an alarm: the platform's own, at the
// identity it concerns; a breaker trip carries circuit_open.
func alarmEvent(a sandbox.Alarm) sandbox.AuditEvent {
	e := sandbox.AuditEvent{At: a.At, Door: "platform", Verb: "alarm." + a.Kind, Tenant: a.Tenant, Agent: a.Agent}
	if a.Kind == "circuit_open" {
		e.Code = sandbox.CodeCircuitOpen
	}
	return e
}

// tenantsFile is the JSON of --tenants: the tenants (name, allocation,
// policy) and agent identities the operator declares.
type tenantsFile struct {
	Tenants []sandbox.Tenant `json:"tenants"`
	Agents  []sandbox.Agent  `json:"agents"`
}

// applyTenantsFile makes the daemon's tenants and agents match the file:
// a tenant it declares is created, or updated to exactly the file's
// allocation, pool and policy; an agent is created unless it exists in the same
// tenant. Tenants and agents the file does not name are left alone.
func applyTenantsFile(ctx context.Context, svc *lifecycle.Service, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var f tenantsFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return err
	}
	op := sandbox.Principal{Tenant: "system", Agent: "tenants-file", Role: sandbox.RoleOperator}
	for _, t := range f.Tenants {
		_, err := svc.Tenancy.CreateTenant(ctx, op, t)
		if sandbox.IsCode(err, sandbox.CodeAlreadyExists) {
			_, err = svc.Tenancy.UpdateTenant(ctx, op, t.Name, sandbox.TenantUpdate{Allocation: &t.Allocation, Pool: &t.Pool, Policy: t.Policy, ResetPolicy: true})
		}
		if err != nil {
			return fmt.Errorf("tenant %q: %w", t.Name, err)
		}
	}
	for _, a := range f.Agents {
		_, err := svc.Tenancy.CreateAgent(ctx, op, a)
		if sandbox.IsCode(err, sandbox.CodeAlreadyExists) {
			if as, lerr := svc.Tenancy.ListAgents(ctx, op, a.Tenant); lerr == nil && slices.ContainsFunc(as, func(x sandbox.Agent) bool { return x.Name == a.Name }) {
				continue
			}
		}
		if err != nil {
			return fmt.Errorf("agent %q: %w", a.Name, err)
		}
	}
	return nil
}

// layerStore is what the daemon needs of its layer store.
type layerStore interface {
	layers.Store
	Walk(ctx context.Context, fn func(layers.Info) error) error
	Close() error
}

// openLayers opens the layer store cfg.layers names under the data dir.
// "auto" is btrfs when the kernel has it (/proc/filesystems lists it),
// else the overlayfs fallback.
func openLayers(ctx context.Context, cfg serveConfig, log *slog.Logger) (layerStore, error) {
	kind := cfg.layers
	if kind == "auto" {
		kind = "overlay"
		if fss, err := os.ReadFile("/proc/filesystems"); err == nil && slices.Contains(strings.Fields(string(fss)), "btrfs") {
			kind = "btrfs"
		}
	}
	dir := filepath.Join(cfg.dataDir, "layers")
	switch kind {
	case "btrfs":
		return btrfs.Open(ctx, btrfs.Options{Dir: dir, ImageSize: cfg.layersSize, Logger: log})
	case "overlay":
		log.Warn("the overlay layer store is the slower fallback: checkpoints copy what a sandbox wrote, and disk limits are not enforced")
		return overlay.Open(ctx, overlay.Options{Dir: filepath.Join(cfg.dataDir, "layers-overlay"), Logger: log})
	}
	return nil, &usageError{verb: "serve", msg: fmt.Sprintf("unknown layer store %q (want btrfs, overlay or auto)", cfg.layers)}
}

// ensureOperatorToken keeps the operator token file valid: it creates a
// token (storing only its hash) when the file is missing or stale, and
// writes the secret to the file with mode 0600. On a shared store (shared)
// that already holds a live operator token it creates none and returns
// lifecycle.ErrOperatorTokenHeld, leaving the file as it is.
func ensureOperatorToken(ctx context.Context, svc *lifecycle.Service, path string, shared bool) error {
	current, _ := os.ReadFile(path)
	secret, created, err := svc.Tenancy.EnsureOperatorToken(ctx, strings.TrimSpace(string(current)), shared)
	if err != nil || !created {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(secret+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// portFlag parses a port flag into p: 0 to 65535.
func portFlag(p *int) func(string) error {
	return func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 65535 {
			return fmt.Errorf("%q is not a port (0 to 65535)", v)
		}
		*p = n
		return nil
	}
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
