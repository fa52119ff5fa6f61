//go:build nokube

package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/hearth/hearth/sandbox"
)

// TestDaemonInClusterNeedsHearthKube: the hearth built without the
// Kubernetes libraries hands `hearth node` and `hearth serve --kubeconfig`
// to hearth-kube; with none beside it or in PATH, each fails with
// failed_precondition naming it, before its data dir is touched. (The
// end-to-end tests on Kubernetes run their nodes and control planes
// through this hand-over, with hearth-kube present.)
func TestDaemonInClusterNeedsHearthKube(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	dataDir := t.TempDir()
	env := func(string) string { return "" }
	for _, args := range [][]string{
		{"node", "--kubeconfig", "/k", "--store", "postgres://h/db", "--agent", "/bin/true", "--data-dir", dataDir},
		{"serve", "--kubeconfig", "/k", "--store", "postgres://h/db", "--agent", "/bin/true", "--data-dir", dataDir},
		{"serve", "--in-cluster", "--store", "postgres://h/db", "--agent", "/bin/true", "--data-dir", dataDir},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, env, nil, &stdout, &stderr)
		if want := sandbox.CodeFailedPrecondition.ExitCode(); code != want {
			t.Errorf("hearth %s: exit %d, want %d (failed_precondition); stderr:\n%s", strings.Join(args, " "), code, want, stderr.String())
		}
		if !strings.Contains(stderr.String(), "hearth-kube") {
			t.Errorf("hearth %s: stderr names no hearth-kube:\n%s", strings.Join(args, " "), stderr.String())
		}
	}
	if ents, err := os.ReadDir(dataDir); err != nil || len(ents) > 0 {
		t.Errorf("the data dir holds %d entries (%v); a daemon handed over starts nothing here", len(ents), err)
	}
}
