package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// doctorNow is the doctor's clock in these tests.
var doctorNow = time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)

// fakeHealth answers GET /v1/health as the daemon does: the cluster only
// to the operator token, and the API's internal error to it when the
// store fails (storeErr).
type fakeHealth struct {
	operator string
	status   string
	cluster  sandbox.ClusterHealth
	storeErr bool
}

func (f fakeHealth) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || r.URL.Path != "/v1/health" {
		writeFakeError(w, sandbox.Errorf(sandbox.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
		return
	}
	body := map[string]any{"status": f.status, "runtime": "runsc"}
	if r.Header.Get("Authorization") == "Bearer "+f.operator {
		if f.storeErr {
			writeFakeError(w, sandbox.Errorf(sandbox.CodeInternal, "internal error"))
			return
		}
		body["cluster"] = f.cluster
	}
	writeFakeJSON(w, http.StatusOK, body)
}

// healthyCluster is two live nodes of one version, n0 leading.
func healthyCluster() sandbox.ClusterHealth {
	hb := doctorNow.Add(-time.Second)
	return sandbox.ClusterHealth{
		Store: "postgres db:5432/hearth", Schema: 7, SchemaKnown: 7, Node: "n0", Leader: "n0",
		Nodes: []sandbox.NodeHealth{
			{Name: "n0", Address: "10.0.0.1:7077", Version: "v1.2.0", HeartbeatAt: hb, Live: true, ClockSkewMS: 3},
			{Name: "n1", Address: "10.0.0.2:7077", Version: "v1.2.0", HeartbeatAt: hb, Live: true, ClockSkewMS: -40},
		},
	}
}

// goodHost is a host with runsc, the network's tools, btrfs and IPv4
// forwarding.
func goodHost() doctorHost {
	return doctorHost{
		lookPath: func(file string) (string, error) {
			switch file {
			case "runsc":
				return "/usr/local/bin/runsc", nil
			case "ip", "tc", "iptables", "iptables-restore", "ipset":
				return "/usr/sbin/" + file, nil
			}
			return "", errors.New("executable file not found in $PATH")
		},
		readFile: func(name string) ([]byte, error) {
			switch name {
			case "/proc/filesystems":
				return []byte("nodev\tsysfs\nnodev\ttmpfs\n\text4\n\tbtrfs\n"), nil
			case "/proc/sys/net/ipv4/ip_forward":
				return []byte("1\n"), nil
			}
			return nil, fs.ErrNotExist
		},
		isLocal: func(string) bool { return true },
	}
}

// runDoctorTest runs `hearth doctor args...` against url with token, as
// run does, and returns its stdout, stderr and exit code.
func runDoctorTest(t *testing.T, url, token string, host doctorHost, args ...string) (string, string, int) {
	t.Helper()
	env := map[string]string{"HEARTH_URL": url, "HEARTH_TOKEN": token, "HEARTH_DATA_DIR": t.TempDir()}
	var stdout, stderr bytes.Buffer
	c := &cli{getenv: func(k string) string { return env[k] }, stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr}
	ctx := context.Background()
	code := c.report(ctx, doctor(ctx, c, args, host, func() time.Time { return doctorNow }))
	return stdout.String(), stderr.String(), code
}

func TestDoctorHealthy(t *testing.T) {
	srv := httptest.NewServer(fakeHealth{operator: "op", status: "ok", cluster: healthyCluster()})
	t.Cleanup(srv.Close)
	out, errOut, code := runDoctorTest(t, srv.URL, "op", goodHost())
	if code != 0 || errOut != "" {
		t.Fatalf("doctor = exit %d, stderr %q, want 0 and none\n%s", code, errOut, out)
	}
	want := []string{
		"ok daemon: " + srv.URL + " answers (runtime runsc)",
		"ok store: postgres db:5432/hearth, answered by node n0",
		"ok schema: the store and node n0's binary are at schema 7",
		"ok leader: node n0 runs the store-wide loops",
		"ok nodes: 2 live: n0, n1",
		"ok clock: every node's clock is within 500ms of the store's (at most 40ms off)",
		"ok versions: every node runs v1.2.0",
		"ok runtime: runsc (/usr/local/bin/runsc)",
		"ok btrfs: the kernel has btrfs",
		"ok network: ip_forward is 1; ip, tc, iptables, iptables-restore, ipset",
	}
	if got := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); !slices.Equal(got, want) {
		t.Errorf("doctor printed\n%s\nwant\n%s", out, strings.Join(want, "\n"))
	}
}

func TestDoctorProblems(t *testing.T) {
	tests := []struct {
		name   string
		health func(*fakeHealth)
		token  string // "op" unless set
		host   func(*doctorHost)
		want   []string // the problem lines, before "doctor: N problem(s)"
	}{
		{
			name: "dead node",
			health: func(f *fakeHealth) {
				f.cluster.Nodes[1].Live, f.cluster.Nodes[1].HeartbeatAt = false, doctorNow.Add(-7*time.Second)
			},
			want: []string{"doctor: nodes: node n1 is not live: its last heartbeat was at 2026-01-02T15:03:58Z (7s ago); its sandboxes are unavailable"},
		},
		{
			name:   "clock skew",
			health: func(f *fakeHealth) { f.cluster.Nodes[1].ClockSkewMS = -812 },
			want:   []string{"doctor: clock: node n1's clock is 812ms behind the store's (more than 500ms)"},
		},
		{
			name:   "schema newer than the binary",
			health: func(f *fakeHealth) { f.cluster.Schema = 8 },
			want:   []string{"doctor: schema: the store is at schema 8 and node n0's binary knows 7: upgrade hearth on it"},
		},
		{
			name:   "no leader",
			health: func(f *fakeHealth) { f.cluster.Leader = "" },
			want:   []string{"doctor: leader: no node runs the store-wide loops (reaping, pool, audit retention)"},
		},
		{
			name:   "versions differ",
			health: func(f *fakeHealth) { f.cluster.Nodes[1].Version = "v1.3.0" },
			want:   []string{"doctor: versions: the nodes run different versions: v1.2.0 (n0), v1.3.0 (n1); upgrade them to one"},
		},
		{
			name:  "not an operator",
			token: "agent",
			want:  []string{"doctor: store: doctor needs an operator token to check the store and its nodes: make one with `hearth token create --operator`"},
		},
		{
			name:   "store unreachable",
			health: func(f *fakeHealth) { f.storeErr = true },
			want:   []string{"doctor: store: store unreachable: the daemon at URL could not read the store's nodes (internal error); its log says why"},
		},
		{
			name:   "daemon not ok",
			health: func(f *fakeHealth) { f.status = "starting" },
			want:   []string{`doctor: daemon: URL answers status "starting", not "ok"`},
		},
		{
			name: "host lacks everything",
			host: func(h *doctorHost) {
				h.lookPath = func(string) (string, error) { return "", errors.New("not found") }
				h.readFile = func(name string) ([]byte, error) {
					if name == "/proc/filesystems" {
						return []byte("nodev\tsysfs\n\text4\n"), nil
					}
					return nil, fs.ErrPermission
				}
			},
			want: []string{
				"doctor: runtime: neither runsc nor runc is in PATH: the daemon cannot run sandboxes; install gVisor's runsc or runc",
				"doctor: btrfs: the kernel has no btrfs: layers fall back to overlay (slower checkpoints, no disk limits)",
				"doctor: network: cannot read /proc/sys/net/ipv4/ip_forward: permission denied",
				"doctor: network: ip, tc, iptables, iptables-restore, ipset not in PATH: the daemon cannot make the sandboxes' network (install iproute2, iptables and ipset)",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := fakeHealth{operator: "op", status: "ok", cluster: healthyCluster()}
			if tt.health != nil {
				tt.health(&f)
			}
			host := goodHost()
			if tt.host != nil {
				tt.host(&host)
			}
			srv := httptest.NewServer(f)
			t.Cleanup(srv.Close)
			out, errOut, code := runDoctorTest(t, srv.URL, cmp.Or(tt.token, "op"), host)
			want := problemLines(tt.want, srv.URL)
			if code != 1 || errOut != "" || out != want {
				t.Errorf("doctor = exit %d, stderr %q, stdout\n%s\nwant exit 1, no stderr, stdout\n%s", code, errOut, out, want)
			}
		})
	}
}

// problemLines is what doctor prints for problems: lines, with "URL"
// replaced by url, and the count.
func problemLines(lines []string, url string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(strings.ReplaceAll(l, "URL", url) + "\n")
	}
	if len(lines) == 1 {
		b.WriteString("doctor: 1 problem\n")
	} else {
		fmt.Fprintf(&b, "doctor: %d problems\n", len(lines))
	}
	return b.String()
}

func TestDoctorUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now
	out, errOut, code := runDoctorTest(t, url, "op", goodHost())
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 1 || errOut != "" || len(lines) != 2 {
		t.Fatalf("doctor = exit %d, stderr %q, stdout\n%s\nwant exit 1 and two lines", code, errOut, out)
	}
	if want := "doctor: daemon: cannot reach hearth at " + url + ": "; !strings.HasPrefix(lines[0], want) || !strings.Contains(lines[0], "connection refused") {
		t.Errorf("doctor line = %q, want %q…connection refused", lines[0], want)
	}
	if lines[1] != "doctor: 1 problem" {
		t.Errorf("doctor last line = %q, want %q", lines[1], "doctor: 1 problem")
	}
}

func TestDoctorNoToken(t *testing.T) {
	srv := httptest.NewServer(fakeHealth{operator: "op", status: "ok", cluster: healthyCluster()})
	t.Cleanup(srv.Close)
	out, _, code := runDoctorTest(t, srv.URL, "", goodHost())
	want := "doctor: store: no token was sent; doctor needs an operator token to check the store and its nodes: make one with `hearth token create --operator`\ndoctor: 1 problem\n"
	if code != 1 || out != want {
		t.Errorf("doctor without a token = exit %d, stdout\n%s\nwant exit 1 and\n%s", code, out, want)
	}
}

// TestDoctorRemote: against a daemon elsewhere, this host is not checked.
func TestDoctorRemote(t *testing.T) {
	srv := httptest.NewServer(fakeHealth{operator: "op", status: "ok", cluster: healthyCluster()})
	t.Cleanup(srv.Close)
	host := goodHost()
	host.isLocal = func(string) bool { return false }
	host.lookPath = func(string) (string, error) { t.Error("doctor looked at this host"); return "", errors.New("no") }
	out, _, code := runDoctorTest(t, srv.URL, "op", host)
	if code != 0 || strings.Contains(out, "ok runtime:") {
		t.Errorf("doctor of a remote daemon = exit %d\n%s\nwant 0 and no host checks", code, out)
	}
}

func TestDoctorJSON(t *testing.T) {
	f := fakeHealth{operator: "op", status: "ok", cluster: healthyCluster()}
	f.cluster.Nodes[1].Live = false
	f.cluster.Nodes[1].ClockSkewMS = 900
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	out, errOut, code := runDoctorTest(t, srv.URL, "op", goodHost(), "--json")
	if code != 1 || errOut != "" {
		t.Fatalf("doctor --json = exit %d, stderr %q, want 1 and none", code, errOut)
	}
	var got struct {
		Checks []struct {
			Name   *string `json:"name"`
			OK     *bool   `json:"ok"`
			Detail *string `json:"detail"`
		} `json:"checks"`
		Problems *int `json:"problems"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil || got.Problems == nil {
		t.Fatalf("doctor --json printed %s: %v; want {\"checks\",\"problems\"}", out, err)
	}
	var failed []string
	for _, c := range got.Checks {
		if c.Name == nil || c.OK == nil || c.Detail == nil || *c.Detail == "" {
			t.Fatalf("doctor --json check %+v lacks name, ok or detail", c)
		}
		if !*c.OK {
			failed = append(failed, *c.Name)
		}
	}
	if *got.Problems != 2 || !slices.Equal(failed, []string{"nodes", "clock"}) {
		t.Errorf("doctor --json = problems %d, failed checks %q; want 2, [nodes clock]", *got.Problems, failed)
	}
	if len(got.Checks) != 10 {
		t.Errorf("doctor --json listed %d checks, want 10 (8 passed, 2 failed)\n%s", len(got.Checks), out)
	}
}

func TestIsLocalURL(t *testing.T) {
	tests := []struct {
		url  string
		want bool
	}{
		{"http://127.0.0.1:7077", true},
		{"127.0.0.1:7077", true},
		{"http://localhost:7077", true},
		{"http://[::1]:7077", true},
		{"http://0.0.0.0:7077", true},
		{"http://192.0.2.1:7077", false},
		{"https://hearth.example.com", false},
	}
	for _, tt := range tests {
		if got := isLocalURL(tt.url); got != tt.want {
			t.Errorf("isLocalURL(%q) = %v, want %v", tt.url, got, tt.want)
		}
	}
}
