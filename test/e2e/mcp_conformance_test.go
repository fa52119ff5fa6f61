package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/audit"
	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/httpapi"
	"github.com/hearth/hearth/mcpserver"
	"github.com/hearth/hearth/metrics"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/daemontest"
	"github.com/hearth/hearth/testutil/mcpfixtures"
)

// nodeJS returns the path of Node 22 and the npm prefix holding the MCP
// packages (the conformance suite and the TypeScript SDK, in mcp-js/ or
// HEARTH_MCP_JS), or skips (fails under HEARTH_TEST_STRICT) without them.
func nodeJS(t *testing.T) (node, prefix string) {
	t.Helper()
	return npmPackages(t, "HEARTH_MCP_JS", "mcp-js", "@modelcontextprotocol/conformance", "@modelcontextprotocol/sdk")
}

// bearerProxy is a loopback reverse proxy to the daemon that adds the
// token to every request, for clients that send none. It passes the Host
// header through, so that the daemon sees what the client sent.
func bearerProxy(t *testing.T, daemonURL, token string) string {
	t.Helper()
	target, err := url.Parse(daemonURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = r.In.Host
		r.Out.Header.Set("Authorization", "Bearer "+token)
	}, ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
		if r.Context().Err() == nil { // not a client that hung up
			t.Logf("proxy: %s %s: %v", r.Method, r.URL, err)
		}
		w.WriteHeader(http.StatusBadGateway)
	}})
	t.Cleanup(proxy.Close)
	return proxy.URL
}

// conformanceCheck is one check of the suite's checks.json.
type conformanceCheck struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	Status       string `json:"status"` // SUCCESS, FAILURE, WARNING, INFO, SKIPPED
	ErrorMessage string `json:"errorMessage"`
}

// TestMCPConformance runs the official MCP conformance suite (npm
// @modelcontextprotocol/conformance, every server scenario, the pending
// ones too) with Node 22 against the daemon's MCP door carrying the
// suite's fixtures (fixtureDoor), through a proxy that adds the operator's
// token. A scenario that fails must be listed, with the reason it does not
// apply to hearth, in testdata/mcp-conformance-expected-failures.txt; a
// listed one that passes is stale and fails the test too.
func TestMCPConformance(t *testing.T) {
	node, prefix := nodeJS(t)
	expected := readExpectedFailures(t, filepath.Join("testdata", "mcp-conformance-expected-failures.txt"))
	doorURL, token := fixtureDoor(t)
	mcpURL := bearerProxy(t, doorURL, token) + "/mcp"

	results := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(prefix, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js"),
		"server", "--suite", "all", "--url", mcpURL, "--output-dir", results)
	cmd.Dir = results
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run() // non-zero when a scenario failed: judged below
	t.Cleanup(func() {
		if t.Failed() || testing.Verbose() {
			t.Logf("conformance suite output (%v):\n%s", runErr, out.String())
		}
	})

	// One directory per scenario, server-<scenario>-<timestamp>, holding
	// checks.json.
	files, _ := filepath.Glob(filepath.Join(results, "*", "checks.json"))
	if len(files) == 0 {
		files, _ = filepath.Glob(filepath.Join(results, "*", "*", "checks.json"))
	}
	if len(files) == 0 {
		t.Fatalf("the conformance suite wrote no results (%v)", runErr)
	}
	failed := map[string][]string{}
	var scenarios, warnings []string
	for _, f := range files {
		dir := filepath.Base(filepath.Dir(f))
		m := resultDirRE.FindStringSubmatch(dir)
		if m == nil {
			t.Fatalf("unexpected result directory %s", dir)
		}
		name := m[1]
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var checks []conformanceCheck
		if err := json.Unmarshal(b, &checks); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		scenarios = append(scenarios, name)
		for _, c := range checks {
			switch c.Status {
			case "FAILURE":
				failed[name] = append(failed[name], c.ID+": "+c.ErrorMessage)
			case "WARNING":
				warnings = append(warnings, name+": "+c.ID+": "+c.ErrorMessage)
			}
		}
	}
	slices.Sort(scenarios)
	t.Logf("conformance: %d scenarios, %d failed, %d expected to fail, %d warnings", len(scenarios), len(failed), len(expected), len(warnings))
	for _, w := range warnings { // a SHOULD the suite checks: reported, not failed
		t.Logf("warning: %s", w)
	}
	for name, why := range failed {
		if _, ok := expected[name]; ok {
			t.Logf("scenario %s fails as expected (%s): %s", name, expected[name], strings.Join(why, "; "))
			continue
		}
		t.Errorf("scenario %s failed: %s", name, strings.Join(why, "; "))
	}
	for name := range expected {
		switch {
		case !slices.Contains(scenarios, name):
			t.Errorf("expected-failures lists %s, which the suite did not run", name)
		case failed[name] == nil:
			t.Errorf("scenario %s passes: remove it from the expected failures", name)
		}
	}
}

// fixtureDoor serves, until t ends, the daemon's HTTP API with its MCP
// door at /mcp, wired as `hearth serve` wires them (audit, metrics, the
// per-token limits), plus the conformance suite's fixtures
// (testutil/mcpfixtures), which the hearth binary does not contain. The
// daemon is in miniature (testutil/daemontest: driver/fake, layers/fake):
// the fixtures touch no sandbox, and the door's protocol handling is the
// daemon's own. It returns the API's URL and an operator token.
func fixtureDoor(t *testing.T) (url, token string) {
	t.Helper()
	d := daemontest.New(t, daemontest.Options{})
	const operatorToken = "hearth_testtokenfortheoperator"
	d.AddToken(t, "tok-op", operatorToken, sandbox.Principal{Tenant: sandbox.SystemTenant, Agent: "operator", Role: sandbox.RoleOperator})
	rec := audit.New(d.DB.Audit(), nil)
	t.Cleanup(func() { rec.Close(context.Background()) })
	mcp := mcpserver.New(d.Svc, mcpserver.Options{
		Audit:       rec,
		MaxSessions: door.DefaultMaxConnections,
		Extensions:  []mcpserver.Extension{mcpfixtures.Extension()},
	})
	reg := metrics.NewRegistry()
	chain := door.New(d.Svc.Tenancy, d.Svc.Sandboxes, door.Options{Audit: rec, Metrics: reg, Counts: d.Svc.Sandboxes.Counts})
	srv := httptest.NewServer(chain.Handler(httpapi.New(d.Svc, httpapi.Options{Audit: rec, AuditLog: d.DB.Audit(), Metrics: reg}), mcp.Door()))
	t.Cleanup(srv.Close)
	return srv.URL, operatorToken
}

// resultDirRE matches the directory of a scenario's results,
// server-<scenario>-<ISO time with dashes>, e.g.
// server-tools-list-2026-11-30T09-03-19-019Z.
var resultDirRE = regexp.MustCompile(`^server-(.+)-\d{4}-\d\d-\d\dT[\d-]+Z$`)

// readExpectedFailures reads lines "<scenario> <reason>".
func readExpectedFailures(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		name, reason, _ := strings.Cut(line, " ")
		if strings.TrimSpace(reason) == "" {
			t.Fatalf("%s: %q has no reason", path, line)
		}
		m[name] = strings.TrimSpace(reason)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}
