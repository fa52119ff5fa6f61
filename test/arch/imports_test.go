// Package arch_test checks the shape of the tree that docs/ARCHITECTURE.md
// describes: which packages may import which (the import rules), and that
// what only tests need never reaches the binaries.
package arch_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// module is the module path; the rules name packages relative to it.
const module = "github.com/hearth/hearth"

// pkg is what the rules read of a package (`go list -json`).
type pkg struct {
	ImportPath string
	Imports    []string // of its non-test files: what the binaries link
	Deps       []string // with -deps: every package it needs, transitively
}

// rule forbids the packages from matches to import the packages to
// matches. Paths inside the module are relative to it ("httpapi",
// "layers/btrfs"); others are as Go spells them ("os", "golang.org/x/...").
type rule struct {
	name     string
	from, to func(p string) bool
}

// under matches the packages at or below any of roots.
func under(roots ...string) func(string) bool {
	return func(p string) bool {
		for _, r := range roots {
			if p == r || strings.HasPrefix(p, r+"/") {
				return true
			}
		}
		return false
	}
}

// ours matches the module's own packages.
func ours(p string) bool { return !strings.Contains(strings.SplitN(p, "/", 2)[0], ".") && !isStd(p) }

// std are the standard library's packages (`go list std`), set by
// TestMain.
var std map[string]bool

func isStd(p string) bool { return std[p] }

// testSupport matches the packages only tests may import: testutil/…,
// the test-only packages under test/, the conformance suites (…test:
// layerstest, drivertest, storetest) and the fakes.
func testSupport(p string) bool {
	base := path.Base(p)
	return ours(p) && (under("testutil", "test")(p) || strings.HasSuffix(base, "test") || base == "fake")
}

// production matches the module's packages that the binaries may link.
func production(p string) bool { return ours(p) && !testSupport(p) }

// ioPackages are the standard and x/ packages that reach outside the
// process (files, the network, processes, databases, the system, the log)
// or make a result depend on more than the arguments (randomness). policy
// may import none of them. time is not one: policy reads times it is
// given (its callers pass now), and io and bufio parse what it is handed.
var ioPackages = []string{
	"os", "os/exec", "os/signal", "os/user", "io/fs", "io/ioutil", "path/filepath",
	"net", "database/sql", "syscall", "golang.org/x/sys/unix", "plugin",
	"log", "log/slog", "log/syslog", "crypto/rand", "math/rand", "math/rand/v2",
}

// rules are hearth's import rules (docs/ARCHITECTURE.md, "Import rules").
var rules = []rule{
	{
		name: "a door (httpapi, spritesapi, mcpserver) or the door core (door) imports lifecycle and the vocabulary, not the node, its parts or the store",
		from: under("door", "httpapi", "spritesapi", "mcpserver"),
		to:   under("node", "driver", "layers", "store", "network"),
	},
	{
		name: "lifecycle reaches the machine that runs sandboxes only through the node boundary (node), never its parts",
		from: under("lifecycle"),
		to:   under("driver", "layers", "network"),
	},
	{
		name: "the node is below the control plane: it imports neither the store, policy, lifecycle nor a door",
		from: under("node"),
		to:   under("store", "policy", "lifecycle", "door", "httpapi", "spritesapi", "mcpserver"),
	},
	{
		name: "the doors stand side by side on the door core: none imports another, and the core imports none",
		from: under("door", "httpapi", "spritesapi", "mcpserver"),
		to: func(p string) bool {
			return under("httpapi", "spritesapi", "mcpserver")(p)
		},
	},
	{
		name: "the driver imports neither the store, nor policy, nor lifecycle",
		from: under("driver"),
		to:   under("store", "policy", "lifecycle"),
	},
	{
		name: "policy is pure: no I/O package, and of hearth only the vocabulary (sandbox)",
		from: under("policy"),
		to: func(p string) bool {
			return slices.Contains(ioPackages, p) || strings.HasPrefix(p, "net/") ||
				(ours(p) && !under("policy", "sandbox")(p))
		},
	},
	{
		name: "nothing imports cmd/…",
		from: func(string) bool { return true },
		to:   under("cmd"),
	},
	{
		name: "production code imports no test support (testutil/…, test/…, …test, fake)",
		from: production,
		to:   testSupport,
	},
}

// exceptions are edges the tree has today that break a rule, each with the
// work that removes it ("from -> to": reason). Keep it empty: an edge is
// listed only while the change that removes it is under way.
var exceptions = map[string]string{}

// violations returns each edge of pkgs that breaks a rule and is not in
// exceptions, as "rule: from -> to".
func violations(pkgs []pkg, rules []rule, exceptions map[string]string) []string {
	var out []string
	for _, p := range pkgs {
		from := strings.TrimPrefix(p.ImportPath, module+"/")
		for _, imp := range p.Imports {
			to := strings.TrimPrefix(imp, module+"/")
			for _, r := range rules {
				if r.from(from) && r.to(to) {
					if _, ok := exceptions[from+" -> "+to]; !ok {
						out = append(out, fmt.Sprintf("%s: %s -> %s", r.name, from, to))
					}
				}
			}
		}
	}
	return out
}

// TestImportRules checks every package of the module against the rules.
func TestImportRules(t *testing.T) {
	pkgs := goList(t, "./...")
	if len(pkgs) < 20 {
		t.Fatalf("go list ./... found %d packages; the checker would check nothing", len(pkgs))
	}
	for _, v := range violations(pkgs, rules, exceptions) {
		t.Errorf("forbidden import: %s", v)
	}
	// A stale exception hides nothing and must go.
	for edge := range exceptions {
		from, to, _ := strings.Cut(edge, " -> ")
		found := false
		for _, p := range pkgs {
			if strings.TrimPrefix(p.ImportPath, module+"/") == from && slices.Contains(p.Imports, module+"/"+to) {
				found = true
			}
		}
		if !found {
			t.Errorf("exception %q: the tree no longer has this edge; remove it", edge)
		}
	}
}

// TestRulesCatch checks the checker: each synthetic edge breaks a rule and
// must be reported; each allowed one must not be.
func TestRulesCatch(t *testing.T) {
	for _, tc := range []struct {
		from, to  string
		forbidden bool
	}{
		{"httpapi", "store", true},
		{"mcpserver", "layers/btrfs", true},
		{"spritesapi", "driver/oci", true},
		{"httpapi", "network", true},
		{"door", "store", true},
		{"spritesapi", "httpapi", true},
		{"httpapi", "mcpserver", true},
		{"door", "httpapi", true},
		{"spritesapi", "door", false},
		{"httpapi", "node", true},
		{"door", "node", true},
		{"lifecycle", "driver", true},
		{"lifecycle", "layers/btrfs", true},
		{"lifecycle", "network", true},
		{"node", "store", true},
		{"node", "lifecycle", true},
		{"lifecycle", "node", false},
		{"node", "driver", false},
		{"node", "layers", false},
		{"driver/oci", "store/sqlite", true},
		{"driver/oci", "lifecycle", true},
		{"driver", "policy", true},
		{"policy", "os", true},
		{"policy", "net/http", true},
		{"policy", "golang.org/x/sys/unix", true},
		{"policy", "store", true},
		{"lifecycle", "cmd/hearth", true},
		{"mcpserver", "testutil/mcpfixtures", true},
		{"cmd/hearth", "layers/layerstest", true},
		{"lifecycle", "driver/fake", true},
		{"httpapi", "lifecycle", false},
		{"policy", "sandbox", false},
		{"policy", "strings", false},
		{"driver/oci", "network", false},
		{"cmd/hearth", "layers/btrfs", false},
		{"test/e2e", "testutil/mcpfixtures", false},
		{"driver/drivertest", "testutil/testenv", false},
	} {
		p := pkg{ImportPath: module + "/" + tc.from, Imports: []string{tc.to}}
		if ours(tc.to) {
			p.Imports = []string{module + "/" + tc.to}
		}
		got := violations([]pkg{p}, rules, nil)
		if (len(got) > 0) != tc.forbidden {
			t.Errorf("violations(%s -> %s) = %q, want forbidden %v", tc.from, tc.to, got, tc.forbidden)
		}
		if tc.forbidden && len(violations([]pkg{p}, rules, map[string]string{tc.from + " -> " + tc.to: "test"})) > 0 {
			t.Errorf("an exception for %s -> %s does not excuse it", tc.from, tc.to)
		}
	}
}

// binaries are the production binaries' main packages.
var binaries = []string{"./cmd/hearth", "./cmd/hearth-agent"}

// TestBinariesLinkNoTestCode checks that no binary needs a test-support
// package, nor the testing package, transitively.
func TestBinariesLinkNoTestCode(t *testing.T) {
	for _, b := range goList(t, append([]string{"-deps"}, binaries...)...) {
		p := strings.TrimPrefix(b.ImportPath, module+"/")
		if testSupport(p) || p == "testing" {
			t.Errorf("a binary (%s) needs %s", strings.Join(binaries, ", "), p)
		}
	}
}

// agentForbidden are packages the agent (PID 1 of every sandbox) must not
// link: it speaks its own protocol on a unix socket, and what it links is
// paged in by every sandbox's start and kept in every sandbox's memory.
// net/http alone brings crypto/tls and compress/gzip: 1.7 MB of the binary.
var agentForbidden = []string{"net/http", "crypto/tls", "crypto/x509", "compress/gzip"}

// TestAgentLinksNoHTTP checks that hearth-agent links none of agentForbidden.
func TestAgentLinksNoHTTP(t *testing.T) {
	deps := goList(t, "-deps", "./cmd/hearth-agent")
	if len(deps) < 10 {
		t.Fatalf("go list -deps found %d packages for the agent; the check would check nothing", len(deps))
	}
	for _, p := range deps {
		if slices.Contains(agentForbidden, p.ImportPath) {
			t.Errorf("hearth-agent links %s", p.ImportPath)
		}
	}
}

// kubeLibraries are the import paths of the Kubernetes libraries (and of
// hearth's own package on them), with the packages under each, that
// bin/hearth, the command-line build (the tag nokube), must not link:
// their package initialization costs every call of the command ~25 ms of
// CPU before it starts.
var kubeLibraries = []string{"k8s.io", "sigs.k8s.io", "github.com/virtual-kubelet", module + "/kube"}

// TestCLILinksNoKubernetes checks that hearth built with the tag nokube
// links none of kubeLibraries, that it builds, and that the build without
// the tag (hearth-kube) does link them: the check checks something.
func TestCLILinksNoKubernetes(t *testing.T) {
	kubeLinked := func(deps []pkg) []string {
		var found []string
		for _, p := range deps {
			for _, prefix := range kubeLibraries {
				root := strings.TrimSuffix(prefix, "/")
				if p.ImportPath == root || strings.HasPrefix(p.ImportPath, root+"/") {
					found = append(found, p.ImportPath)
				}
			}
		}
		return found
	}
	slim := goList(t, "-deps", "-tags", "nokube", "./cmd/hearth")
	if len(slim) < 100 {
		t.Fatalf("go list -deps found %d packages for hearth; the check would check nothing", len(slim))
	}
	if found := kubeLinked(slim); len(found) > 0 {
		t.Errorf("hearth (-tags nokube) links %d Kubernetes packages, among them %s", len(found), strings.Join(found[:min(5, len(found))], ", "))
	}
	if found := kubeLinked(goList(t, "-deps", "./cmd/hearth")); len(found) == 0 {
		t.Error("hearth-kube (no tag) links no Kubernetes package; kubeLibraries names none of what it links")
	}
	cmd := exec.Command("go", "build", "-tags", "nokube", "-o", filepath.Join(t.TempDir(), "hearth"), "./cmd/hearth")
	cmd.Dir = moduleRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags nokube ./cmd/hearth: %v\n%s", err, out)
	}
}

// fixtureStrings are names of the MCP conformance suite's fixtures
// (testutil/mcpfixtures) and the flag that once added them to the daemon:
// none may be in the hearth binary.
var fixtureStrings = []string{"test_simple_text", "test_elicitation_sep1330_enums", "test_prompt_with_embedded_resource", "mcp-conformance-fixtures"}

// TestBinaryHasNoFixtures builds hearth and looks for the fixtures in it.
func TestBinaryHasNoFixtures(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the hearth binary")
	}
	bin := filepath.Join(t.TempDir(), "hearth")
	// CGO_ENABLED=0, as testutil/daemonproc builds it: the build cache
	// serves both.
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/hearth")
	cmd.Dir = moduleRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/hearth: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range fixtureStrings {
		if bytes.Contains(b, []byte(s)) {
			t.Errorf("the hearth binary contains %q, a conformance fixture's", s)
		}
	}
	// The check can fail: the names it looks for are in the fixtures.
	src, err := os.ReadFile(filepath.Join(moduleRoot(t), "testutil", "mcpfixtures", "mcpfixtures.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range fixtureStrings[:3] {
		if !bytes.Contains(src, []byte(`"`+s+`"`)) {
			t.Errorf("testutil/mcpfixtures has no fixture %q: update fixtureStrings", s)
		}
	}
}

// TestMain reads the standard library's packages, which ours tells apart.
func TestMain(m *testing.M) {
	out, err := exec.Command("go", "list", "std").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "go list std:", err)
		os.Exit(1)
	}
	std = map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		std[p] = true
	}
	os.Exit(m.Run())
}

// moduleRoot is the module's directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// goList runs `go list -json args...` at the module's root.
func goList(t *testing.T, args ...string) []pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json"}, args...)...)
	cmd.Dir = moduleRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
}
