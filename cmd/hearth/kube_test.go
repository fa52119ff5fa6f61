//go:build !nokube

package main

import (
	"io"
	"strings"
	"testing"
)

// TestParseNode: `hearth node` needs a cluster and a Postgres store, takes
// --name as its node's name and a valid --pool, and overrides its
// capacity's defaults one resource at a time.
func TestParseNode(t *testing.T) {
	env := func(string) string { return "" }
	base := []string{"--agent", "/bin/true", "--kubeconfig", "/k", "--store", "postgres://h/db", "--name", "hn0"}
	cfg, err := parseNode(append(base, "--pool", "gold", "--capacity", "cpu=3500m,pods=10"), env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.node != "hn0" || cfg.kube.role != kubeNode || cfg.kube.pool != "gold" {
		t.Fatalf("cfg = node %q, role %v, pool %q", cfg.node, cfg.kube.role, cfg.kube.pool)
	}
	capacity, err := cfg.kube.resources(cfg.layersSize)
	if err != nil {
		t.Fatal(err)
	}
	if cpu, pods := capacity.Cpu().MilliValue(), capacity.Pods().Value(); cpu != 3500 || pods != 10 {
		t.Fatalf("capacity cpu %dm, pods %d; want the flag's", cpu, pods)
	}
	if mem := capacity.Memory().Value(); mem <= 0 {
		t.Fatalf("memory %d; want the default", mem)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--agent", "/bin/true", "--store", "postgres://h/db"}, "--kubeconfig FILE or --in-cluster"},
		{[]string{"--agent", "/bin/true", "--kubeconfig", "/k"}, "Postgres store"},
		{append(base, "--pool", "Gold!"), "invalid pool"},
		{append(base, "--capacity", "gpus=1"), "--capacity"},
		{append(base, "--capacity", "cpu=lots"), "--capacity"},
	} {
		if _, err := parseNode(tc.args, env, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseNode(%q) = %v; want an error saying %q", tc.args, err, tc.want)
		}
	}
	if _, err := parseServe([]string{"--agent", "/bin/true", "--kubeconfig", "/k"}, env, io.Discard); err == nil || !strings.Contains(err.Error(), "--store") {
		t.Errorf("serve --kubeconfig without a Postgres store = %v", err)
	}
}
