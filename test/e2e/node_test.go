package e2e_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hearth/hearth/testutil/testenv"
)

// The real-client tests run JavaScript with Node 22 and npm packages that
// scripts/install.sh installs, cached, under $HEARTH_CACHE (default
// /var/cache/hearth): Node in node22/ (HEARTH_NODE22 overrides its path),
// each set of packages in a directory of its own.

// npmPackages returns the path of Node 22 and the npm prefix holding pkgs:
// the environment variable env when set, else dir under the cache. It
// skips (fails under HEARTH_TEST_STRICT) when either is missing, and logs
// the versions it found.
func npmPackages(t *testing.T, env, dir string, pkgs ...string) (node, prefix string) {
	t.Helper()
	cache := os.Getenv("HEARTH_CACHE")
	if cache == "" {
		cache = "/var/cache/hearth"
	}
	node = os.Getenv("HEARTH_NODE22")
	if node == "" {
		node = filepath.Join(cache, "node22", "node_modules", ".bin", "node")
	}
	prefix = os.Getenv(env)
	if prefix == "" {
		prefix = filepath.Join(cache, dir)
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "v22.") {
		testenv.Skip(t, "Node 22 is not at %s (%q, %v); ./scripts/install.sh installs it", node, out, err)
	}
	versions := []string{"Node " + strings.TrimSpace(string(out))}
	for _, pkg := range pkgs {
		b, err := os.ReadFile(filepath.Join(prefix, "node_modules", pkg, "package.json"))
		if err != nil {
			testenv.Skip(t, "npm %s is not in %s (%v); ./scripts/install.sh installs it", pkg, prefix, err)
		}
		var meta struct{ Version string }
		if err := json.Unmarshal(b, &meta); err != nil {
			t.Fatalf("%s's package.json: %v", pkg, err)
		}
		versions = append(versions, pkg+" "+meta.Version)
	}
	t.Logf("%s", strings.Join(versions, ", "))
	return node, prefix
}
