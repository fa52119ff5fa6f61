package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/daemontest"
)

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1024", 1024, true},
		{"512MiB", 512 << 20, true},
		{"64GiB", 64 << 30, true},
		{"64G", 64 << 30, true},
		{"1.5GiB", 3 << 29, true},
		{"2TiB", 2 << 40, true},
		{"4k", 4 << 10, true},
		{"", 0, false},
		{"GiB", 0, false},
		{"-1GiB", 0, false},
		{"12XB", 0, false},
		{"1.2.3G", 0, false},
	} {
		got, err := parseBytes(tc.in)
		if (err == nil) != tc.ok || tc.ok && got != tc.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestTokenCreateOperator: `hearth token create --operator` asks the API
// for an operator token (role operator, no tenant, no name prefix; --agent
// and --ttl pass through), prints its secret alone on stdout, and passes
// on the daemon's refusal of a caller that is no operator; --operator with
// --tenant, --role or --name-prefix is a usage error sent nowhere.
func TestTokenCreateOperator(t *testing.T) {
	var (
		mu   sync.Mutex
		reqs []map[string]any
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/v1/tokens" {
			http.Error(w, "unexpected request", http.StatusTeapot)
			return
		}
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		reqs = append(reqs, body)
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer hearth_operator" {
			writeFakeError(w, sandbox.Errorf(sandbox.CodePermissionDenied, "only an operator may create operator tokens").WithHint("use an operator token"))
			return
		}
		writeFakeJSON(w, http.StatusOK, map[string]any{"token": "hearth_minted", "info": sandbox.TokenInfo{
			ID: "tok-abcdefgh", Tenant: sandbox.SystemTenant, Agent: "operator", Role: sandbox.RoleOperator, CreatedAt: time.Now()}})
	}))
	defer srv.Close()
	hearth := func(token string, args ...string) (string, string, int) {
		env := map[string]string{"HEARTH_URL": srv.URL, "HEARTH_TOKEN": token}
		var out, errb bytes.Buffer
		code := run(t.Context(), append([]string{"token", "create"}, args...), func(k string) string { return env[k] }, nil, &out, &errb)
		return out.String(), errb.String(), code
	}
	sent := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(reqs)
	}
	last := func() map[string]any {
		mu.Lock()
		defer mu.Unlock()
		if len(reqs) == 0 {
			return nil
		}
		return reqs[len(reqs)-1]
	}

	out, errs, code := hearth("hearth_operator", "--operator")
	if code != 0 || out != "hearth_minted\n" || !strings.Contains(errs, "tok-abcdefgh: operator operator in tenant system") {
		t.Fatalf("token create --operator = %d, %q, %q; want 0, the secret alone on stdout and the token on stderr", code, out, errs)
	}
	if got, want := last(), map[string]any{"role": "operator"}; !reflect.DeepEqual(got, want) {
		t.Errorf("token create --operator sent %v, want %v", got, want)
	}
	if _, _, code := hearth("hearth_operator", "--operator", "--agent", "ci", "--ttl", "1h"); code != 0 {
		t.Fatalf("token create --operator --agent ci --ttl 1h = %d", code)
	}
	if got, want := last(), map[string]any{"role": "operator", "agent": "ci", "ttl": "1h0m0s"}; !reflect.DeepEqual(got, want) {
		t.Errorf("token create --operator --agent ci --ttl 1h sent %v, want %v", got, want)
	}

	// The daemon decides who may: its refusal is the CLI's.
	out, errs, code = hearth("hearth_admin", "--operator")
	if code != sandbox.CodePermissionDenied.ExitCode() || out != "" || !strings.Contains(errs, "error: only an operator may create operator tokens") {
		t.Errorf("token create --operator as a tenant admin = %d, %q, %q; want permission_denied's exit code and message", code, out, errs)
	}

	before := sent()
	for _, extra := range [][]string{{"--tenant", "acme"}, {"--role", "agent"}, {"--name-prefix", "ci-"}} {
		_, errs, code := hearth("hearth_operator", append([]string{"--operator"}, extra...)...)
		if code != exitUsage || !strings.Contains(errs, "--operator takes no "+extra[0]) {
			t.Errorf("token create --operator %q = %d, %q; want a usage error naming %s", extra, code, errs, extra[0])
		}
	}
	if n := sent() - before; n != 0 {
		t.Errorf("usage errors sent %d requests, want none", n)
	}
}

// TestTenantPool drives --pool through the real API: tenant create and
// update send it, get and list show it (a dash for none) and its JSON
// carries it; an update without --pool keeps it, --pool "" un-pins it,
// and the daemon's refusal of a bad pool is the CLI's.
func TestTenantPool(t *testing.T) {
	_, url := newAPI(t)
	hearth := func(args ...string) (string, string, int) {
		env := map[string]string{"HEARTH_URL": url, "HEARTH_TOKEN": testOperatorToken}
		var out, errb bytes.Buffer
		code := run(t.Context(), append([]string{"tenant"}, args...), func(k string) string { return env[k] }, nil, &out, &errb)
		return out.String(), errb.String(), code
	}
	// poolOf is tenant gpu's pool as `tenant get --json` reports it.
	poolOf := func() string {
		t.Helper()
		out, errs, code := hearth("get", "gpu", "--json")
		var tn sandbox.Tenant
		if code != 0 || json.Unmarshal([]byte(out), &tn) != nil {
			t.Fatalf("tenant get gpu --json = %d, %q, %q", code, out, errs)
		}
		return tn.Pool
	}

	out, errs, code := hearth("create", "gpu", "--cpu", "16", "--memory", "64GiB", "--disk", "500GiB", "--pool", "gpu-a100")
	if code != 0 || !regexp.MustCompile(`(?m)^pool: +gpu-a100$`).MatchString(out) {
		t.Fatalf("tenant create --pool gpu-a100 = %d, %q, %q; want a pool: line", code, out, errs)
	}
	if got := poolOf(); got != "gpu-a100" {
		t.Errorf("pool after create --pool gpu-a100 = %q", got)
	}
	out, _, code = hearth("list")
	if code != 0 || !strings.HasPrefix(out, "NAME ") ||
		!regexp.MustCompile(`(?m)^NAME +CPU +MEMORY +DISK +POOL +POLICY$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^gpu +16 CPUs +64 GiB +500 GiB +gpu-a100 +- *$`).MatchString(out) {
		t.Errorf("tenant list = %d\n%s; want the POOL column, gpu-a100 in gpu's row", code, out)
	}

	if _, errs, code := hearth("update", "gpu", "--budget", "50"); code != 0 || poolOf() != "gpu-a100" {
		t.Errorf("tenant update without --pool = %d, %q; pool %q, want gpu-a100 kept", code, errs, poolOf())
	}
	if out, errs, code := hearth("update", "gpu", "--pool", "arm64"); code != 0 || !strings.Contains(out, "arm64") || poolOf() != "arm64" {
		t.Errorf("tenant update --pool arm64 = %d, %q, %q; pool %q", code, out, errs, poolOf())
	}
	out, errs, code = hearth("update", "gpu", "--pool", "")
	if code != 0 || !regexp.MustCompile(`(?m)^pool: +-$`).MatchString(out) || poolOf() != "" {
		t.Errorf("tenant update --pool '' = %d, %q, %q; want the pool gone (pool: -)", code, out, errs)
	}

	_, errs, code = hearth("update", "gpu", "--pool", "GPU_A100")
	if code != sandbox.CodeInvalidArgument.ExitCode() || !strings.Contains(errs, `invalid pool "GPU_A100"`) || !strings.Contains(errs, "hint: ") {
		t.Errorf("tenant update --pool GPU_A100 = %d, %q; want invalid_argument with a hint", code, errs)
	}
}

// TestTenantsFilePool: a tenant of the --tenants file takes its "pool" at
// the start that creates it, keeps it at the next start, and takes the
// file's change of it, or its removal, at the next.
func TestTenantsFilePool(t *testing.T) {
	d := daemontest.New(t, daemontest.Options{})
	file := filepath.Join(t.TempDir(), "tenants.json")
	apply := func(pool string) {
		t.Helper()
		body := `{"tenants": [{"name": "labs", "allocation": {"millicpu": 16000, "memory_bytes": 68719476736, "disk_bytes": 536870912000}` + pool + `}]}`
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := applyTenantsFile(t.Context(), d.Svc, file); err != nil {
			t.Fatalf("applyTenantsFile(%s) = %v", body, err)
		}
	}
	pool := func() string {
		t.Helper()
		got, err := d.Svc.Tenancy.Pool(t.Context(), "labs")
		if err != nil {
			t.Fatalf("Pool(labs) = %v", err)
		}
		return got
	}
	apply(`, "pool": "gpu-a100"`)
	if got := pool(); got != "gpu-a100" {
		t.Errorf("pool after the start that creates labs = %q, want gpu-a100", got)
	}
	apply(`, "pool": "gpu-a100"`)
	if got := pool(); got != "gpu-a100" {
		t.Errorf("pool after a restart = %q, want gpu-a100 kept", got)
	}
	apply(`, "pool": "arm64"`)
	if got := pool(); got != "arm64" {
		t.Errorf("pool after the file moved labs = %q, want arm64", got)
	}
	apply(``)
	if got := pool(); got != "" {
		t.Errorf("pool after the file dropped it = %q, want none", got)
	}
}
