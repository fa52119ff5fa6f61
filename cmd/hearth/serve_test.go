package main

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/instance"
	"github.com/hearth/hearth/metrics"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/secrets"
	"github.com/hearth/hearth/testutil/daemontest"
)

// TestParseServeRuntimeFlags: --runtime-flag is repeatable, keeps the
// order given, and refuses a value that is not a flag.
func TestParseServeRuntimeFlags(t *testing.T) {
	env := func(string) string { return "" }
	cfg, err := parseServe([]string{"--agent", "/bin/true", "--runtime-flag", "--platform=kvm", "--runtime-flag=--debug-log=/tmp/runsc/"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"--platform=kvm", "--debug-log=/tmp/runsc/"}; !slices.Equal(cfg.runtimeFlags, want) {
		t.Errorf("runtimeFlags = %q, want %q", cfg.runtimeFlags, want)
	}
	if cfg, err := parseServe([]string{"--agent", "/bin/true"}, env, io.Discard); err != nil || cfg.runtimeFlags != nil {
		t.Errorf("without --runtime-flag: runtimeFlags = %q, %v; want none", cfg.runtimeFlags, err)
	}
	_, err = parseServe([]string{"--agent", "/bin/true", "--runtime-flag", "platform=kvm"}, env, io.Discard)
	var usage *usageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), `"platform=kvm" is not a flag`) {
		t.Errorf("--runtime-flag platform=kvm: %v; want a usage error naming it", err)
	}
}

// TestServePorts: without --dns-port and --gateway-port the default
// instance keeps 10053 and 10080 and any other picks free ports (0);
// --gateway-port 0 turns the gateway off (-1); given ports win.
func TestServePorts(t *testing.T) {
	env := func(string) string { return "" }
	def, other := &instance.Instance{Names: instance.NamesOf(instance.DefaultName, 0)}, &instance.Instance{Names: instance.NamesOf("staging", 3)}
	for _, tc := range []struct {
		args         []string
		inst         *instance.Instance
		dns, gateway int
	}{
		{nil, def, 10053, 10080},
		{nil, other, 0, 0},
		{[]string{"--gateway-port", "0"}, def, 10053, -1},
		{[]string{"--gateway-port", "0"}, other, 0, -1},
		{[]string{"--gateway-port", "10081", "--dns-port", "10054"}, other, 10054, 10081},
		{[]string{"--dns-port", "0"}, def, 0, 10080},
	} {
		cfg, err := parseServe(append([]string{"--agent", "/bin/true"}, tc.args...), env, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if dns, gateway := servePorts(cfg, tc.inst); dns != tc.dns || gateway != tc.gateway {
			t.Errorf("servePorts(%q, %s) = %d, %d; want %d, %d", tc.args, tc.inst.Instance, dns, gateway, tc.dns, tc.gateway)
		}
	}
	for _, args := range [][]string{{"--dns-port", "65536"}, {"--gateway-port", "-1"}, {"--dns-port", "x"}} {
		var usage *usageError
		if _, err := parseServe(append([]string{"--agent", "/bin/true"}, args...), env, io.Discard); !errors.As(err, &usage) {
			t.Errorf("parseServe(%q) = %v, want a usage error", args, err)
		}
	}
	if cfg, err := parseServe([]string{"--agent", "/bin/true", "--instance", "staging"}, env, io.Discard); err != nil || cfg.instance != "staging" {
		t.Errorf("--instance staging: instance = %q, %v", cfg.instance, err)
	}
}

// TestOpenInstance: a new data dir is an instance of its own, named from
// its path or by --instance; one that holds a database and sandboxes but
// no record (made before instances) is the default instance, whose
// objects keep the names they had; one from before instances with no
// sandbox left is named like a new one.
func TestOpenInstance(t *testing.T) {
	reg, log := t.TempDir(), slog.New(slog.DiscardHandler)
	open := func(dir, name string) instance.Names {
		t.Helper()
		inst, err := openInstance(serveConfig{dataDir: dir, instance: name}, reg, log)
		if err != nil {
			t.Fatalf("openInstance(%s, %q) = %v", dir, name, err)
		}
		inst.Close()
		return inst.Names
	}
	if got := open(t.TempDir(), ""); got.Default() || got.Network == "hearth" {
		t.Errorf("a new data dir's instance = %+v, want one of its own", got)
	}
	if got := open(t.TempDir(), "staging"); got.Instance != "staging" || got.CgroupParent != "hearth-staging" {
		t.Errorf("a new data dir's instance with --instance staging = %+v", got)
	}
	old, empty := t.TempDir(), t.TempDir()
	for _, f := range []string{filepath.Join(old, "hearth.db"), filepath.Join(old, "oci", "runsc", "sandboxes", "abc", "pid"), filepath.Join(empty, "hearth.db"), filepath.Join(empty, "network", "policy", "x")} {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if got := open(empty, "prod"); got.Instance != "prod" {
		t.Errorf("a data dir from before instances with no sandbox, --instance prod = %+v", got)
	}
	if got, want := open(old, ""), instance.NamesOf(instance.DefaultName, 0); got != want {
		t.Errorf("a data dir from before instances = %+v, want the default instance %+v", got, want)
	}
	if got := open(old, ""); !got.Default() {
		t.Errorf("again = %+v, want the default instance (recorded)", got)
	}
}

// TestParseServeMaxConnections: --max-connections defaults to the API's
// default and refuses less than one.
func TestParseServeMaxConnections(t *testing.T) {
	env := func(string) string { return "" }
	if cfg, err := parseServe([]string{"--agent", "/bin/true"}, env, io.Discard); err != nil || cfg.maxConnections != door.DefaultMaxConnections {
		t.Errorf("default maxConnections = %d, %v; want %d", cfg.maxConnections, err, door.DefaultMaxConnections)
	}
	if cfg, err := parseServe([]string{"--agent", "/bin/true", "--max-connections", "8"}, env, io.Discard); err != nil || cfg.maxConnections != 8 {
		t.Errorf("--max-connections 8 = %d, %v", cfg.maxConnections, err)
	}
	_, err := parseServe([]string{"--agent", "/bin/true", "--max-connections", "0"}, env, io.Discard)
	var usage *usageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "--max-connections") {
		t.Errorf("--max-connections 0: %v; want a usage error naming it", err)
	}
}

// TestParseServeStore: --store defaults to HEARTH_STORE, then to none
// (SQLite in the data dir); a value that is not a postgres:// URL is a
// usage error that does not repeat it (it may hold a password); and
// --max-concurrent-execs and --reserved-cpus refuse a negative count
// (the CPUs reserved are one unless told), and --memory-reserve anything
// below -1 (0, the default, and -1 are what oci.Options reads).
func TestParseServeStore(t *testing.T) {
	const url = "postgres://hearth:s3cret@127.0.0.1:5432/hearth?sslmode=disable"
	none := func(string) string { return "" }
	withEnv := func(k string) string {
		if k == "HEARTH_STORE" {
			return url
		}
		return ""
	}
	for _, tt := range []struct {
		args []string
		env  func(string) string
		want string
	}{
		{nil, none, ""},
		{nil, withEnv, url},
		{[]string{"--store", "postgresql://h@db/x"}, withEnv, "postgresql://h@db/x"},
	} {
		cfg, err := parseServe(append([]string{"--agent", "/bin/true"}, tt.args...), tt.env, io.Discard)
		if err != nil || cfg.storeURL != tt.want {
			t.Errorf("parseServe(%q) store = %q, %v; want %q", tt.args, cfg.storeURL, err, tt.want)
		}
	}
	var usage *usageError
	_, err := parseServe([]string{"--agent", "/bin/true", "--store", "mysql://root:s3cret@db/x"}, none, io.Discard)
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "postgres://") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("--store mysql://…: %v; want a usage error asking for postgres://, without the password", err)
	}
	_, err = parseServe([]string{"--agent", "/bin/true", "--max-concurrent-execs", "-1"}, none, io.Discard)
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "--max-concurrent-execs") {
		t.Errorf("--max-concurrent-execs -1: %v; want a usage error naming it", err)
	}
	_, err = parseServe([]string{"--agent", "/bin/true", "--reserved-cpus", "-1"}, none, io.Discard)
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "--reserved-cpus") {
		t.Errorf("--reserved-cpus -1: %v; want a usage error naming it", err)
	}
	for args, want := range map[string]int{"": 1, "--reserved-cpus 0": 0, "--reserved-cpus 3": 3} {
		cfg, err := parseServe(append([]string{"--agent", "/bin/true"}, strings.Fields(args)...), none, io.Discard)
		if err != nil || cfg.reservedCPUs != want {
			t.Errorf("parseServe(%q): reserved CPUs %d, %v; want %d", args, cfg.reservedCPUs, err, want)
		}
	}
	_, err = parseServe([]string{"--agent", "/bin/true", "--memory-reserve", "-2"}, none, io.Discard)
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "--memory-reserve") {
		t.Errorf("--memory-reserve -2: %v; want a usage error naming it", err)
	}
	for args, want := range map[string]int64{"": 0, "--memory-reserve -1": -1, "--memory-reserve 1073741824": 1 << 30} {
		cfg, err := parseServe(append([]string{"--agent", "/bin/true"}, strings.Fields(args)...), none, io.Discard)
		if err != nil || cfg.memoryReserve != want {
			t.Errorf("parseServe(%q): memory reserve %d, %v; want %d", args, cfg.memoryReserve, err, want)
		}
	}
}

// TestDefaultNodeName: a host name becomes a node name that
// sandbox.ValidateNodeName takes.
func TestDefaultNodeName(t *testing.T) {
	for _, tt := range []struct{ host, want string }{
		{"web1", "web1"},
		{"Web1.Example.COM", "web1-example-com"},
		{"build_box 2", "build-box-2"},
		{"-edge-", "edge"},
		{"..", "node"},
		{"", "node"},
		{"nœud-7", "n-ud-7"},
		{strings.Repeat("a", 62) + ".b", strings.Repeat("a", 62)}, // cut at 63, and the '-' it ends with trimmed
		{strings.Repeat("ab", 40), strings.Repeat("ab", 31) + "a"},
	} {
		got := defaultNodeName(tt.host)
		if got != tt.want {
			t.Errorf("defaultNodeName(%q) = %q, want %q", tt.host, got, tt.want)
		}
		if err := sandbox.ValidateNodeName(got); err != nil {
			t.Errorf("defaultNodeName(%q) = %q, which ValidateNodeName refuses: %v", tt.host, got, err)
		}
	}
}

// TestParseServeNode: --node, else HEARTH_NODE, else the host's name
// cleaned; an invalid name given is a usage error naming --node and the
// rule it breaks.
func TestParseServeNode(t *testing.T) {
	none := func(string) string { return "" }
	withEnv := func(k string) string {
		if k == "HEARTH_NODE" {
			return "from-env"
		}
		return ""
	}
	host, _ := os.Hostname()
	for _, tt := range []struct {
		args []string
		env  func(string) string
		want string
	}{
		{nil, none, defaultNodeName(host)},
		{nil, withEnv, "from-env"},
		{[]string{"--node", "node-2"}, withEnv, "node-2"},
	} {
		cfg, err := parseServe(append([]string{"--agent", "/bin/true"}, tt.args...), tt.env, io.Discard)
		if err != nil || cfg.node != tt.want {
			t.Errorf("parseServe(%q) node = %q, %v; want %q", tt.args, cfg.node, err, tt.want)
		}
	}
	for _, bad := range []string{"Node_2", "-x", strings.Repeat("n", 64)} {
		_, err := parseServe([]string{"--agent", "/bin/true", "--node", bad}, none, io.Discard)
		var usage *usageError
		if !errors.As(err, &usage) || !strings.Contains(err.Error(), "--node: invalid node name") {
			t.Errorf("--node %q: %v; want a usage error naming --node", bad, err)
		}
	}
}

// TestOpenSealer: --key-file (or HEARTH_KEY_FILE) names a key file that
// must exist, which is never made or replaced, and nothing is made in the
// data dir; a missing or malformed one is failed_precondition naming the
// file and how to make one. Without it the data dir's key is made at the
// first start, with a warning on a Postgres store.
func TestOpenSealer(t *testing.T) {
	env := func(k string) string {
		if k == "HEARTH_KEY_FILE" {
			return "/etc/hearth/deploy.key"
		}
		return ""
	}
	if cfg, err := parseServe([]string{"--agent", "/bin/true"}, env, io.Discard); err != nil || cfg.keyFile != "/etc/hearth/deploy.key" {
		t.Errorf("parseServe with HEARTH_KEY_FILE: keyFile = %q, %v", cfg.keyFile, err)
	}
	const pg = "postgres://h@db/x"
	keys := t.TempDir()
	key := filepath.Join(keys, "deploy.key")
	if err := secrets.CreateKey(key, false); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(key)
	open := func(cfg serveConfig) (*secrets.Box, string, error) {
		var logs bytes.Buffer
		box, err := openSealer(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
		return box, logs.String(), err
	}

	data := t.TempDir()
	box, logs, err := open(serveConfig{dataDir: data, storeURL: pg, keyFile: key})
	if err != nil || logs != "" {
		t.Fatalf("openSealer(--key-file, Postgres) = %v, logs %q; want the key, no warning", err, logs)
	}
	other, err := secrets.Load(key)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := other.Open("acme", "K", box.Seal("acme", "K", []byte("v"))); err != nil || string(got) != "v" {
		t.Errorf("the key file's Box does not open what openSealer's sealed: %q, %v", got, err)
	}
	if ents, _ := os.ReadDir(data); len(ents) != 0 {
		t.Errorf("with --key-file the data dir holds %d files, want none", len(ents))
	}
	if now, _ := os.ReadFile(key); !bytes.Equal(now, want) {
		t.Errorf("openSealer changed the key file")
	}

	short := filepath.Join(keys, "short.key")
	os.WriteFile(short, []byte("short"), 0o600)
	for _, bad := range []string{filepath.Join(keys, "missing.key"), short} {
		_, _, err := open(serveConfig{dataDir: data, keyFile: bad})
		e := sandbox.AsError(err)
		if !sandbox.IsCode(err, sandbox.CodeFailedPrecondition) || !strings.Contains(e.Message, bad) || !strings.Contains(e.Hint, "hearth key create "+bad) {
			t.Errorf("openSealer(--key-file %s) = %v; want failed_precondition naming the file and hearth key create", bad, err)
		}
	}
	if _, err := os.Stat(filepath.Join(keys, "missing.key")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("openSealer made the missing --key-file (%v); want it left missing", err)
	}

	for _, store := range []string{"", pg} {
		data := t.TempDir()
		_, logs, err := open(serveConfig{dataDir: data, storeURL: store})
		if err != nil {
			t.Fatalf("openSealer(no --key-file, store %q) = %v", store, err)
		}
		if fi, err := os.Stat(filepath.Join(data, "secrets.key")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("store %q: the data dir's key = %v, %v; want it made, 0600", store, fi, err)
		}
		if warned := strings.Contains(logs, `level=WARN msg="no --key-file on a Postgres store`); warned != (store == pg) {
			t.Errorf("store %q: logs %q; want a warning naming --key-file only on Postgres", store, logs)
		}
	}
}

// TestStartServiceOperatorToken: the first daemon of a shared store writes
// the operator token file and says where; another daemon of that store
// mints none, writes no file and says the store holds it; a daemon with a
// store of its own mints one whatever the store holds.
func TestStartServiceOperatorToken(t *testing.T) {
	d := daemontest.New(t, daemontest.Options{})
	start := func(cfg serveConfig) string {
		t.Helper()
		var out bytes.Buffer
		if err := startService(t.Context(), cfg, d.Svc, sandboxNet{}, metrics.NewRegistry(), &out, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatalf("startService(%s) = %v", cfg.dataDir, err)
		}
		return out.String()
	}
	const pg = "postgres://h@db/x"
	first, second, own := t.TempDir(), t.TempDir(), t.TempDir()
	firstFile := filepath.Join(first, "operator.token")
	if out := start(serveConfig{dataDir: first, storeURL: pg}); out != "hearth: operator token in "+firstFile+"\n" {
		t.Errorf("first daemon printed %q, want the token file's line", out)
	}
	tok, err := os.ReadFile(firstFile)
	if fi, serr := os.Stat(firstFile); err != nil || serr != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("first daemon's token file = %v, %v; want it, 0600", fi, err)
	}
	if p, err := d.Svc.Tenancy.Authenticate(t.Context(), strings.TrimSpace(string(tok))); err != nil || p.Role != sandbox.RoleOperator {
		t.Fatalf("Authenticate(first daemon's token) = %+v, %v; want an operator", p, err)
	}

	if out := start(serveConfig{dataDir: second, storeURL: pg}); out != "hearth: operator token held by the store: mint one with hearth token create --operator\n" {
		t.Errorf("second daemon printed %q, want the held-by line", out)
	}
	if _, err := os.Stat(filepath.Join(second, "operator.token")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("second daemon's token file: %v; want none", err)
	}
	// A restart of the first keeps its token.
	start(serveConfig{dataDir: first, storeURL: pg})
	if again, _ := os.ReadFile(firstFile); !bytes.Equal(again, tok) {
		t.Errorf("a restart of the first daemon changed its token file")
	}

	if out := start(serveConfig{dataDir: own}); !strings.HasPrefix(out, "hearth: operator token in ") {
		t.Errorf("a daemon with a store of its own printed %q, want the token file's line", out)
	}
	if _, err := os.Stat(filepath.Join(own, "operator.token")); err != nil {
		t.Errorf("a daemon with a store of its own wrote no token file: %v", err)
	}
}
