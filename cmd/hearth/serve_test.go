package main

import (
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
// --max-concurrent-execs refuses a negative count.
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
}
