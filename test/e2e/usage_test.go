package e2e_test

import (
	"encoding/json"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/sandbox"
)

// sendScript sends argv[2] zero bytes to argv[1] ("addr:port"), ends its
// side, and waits for the sink's answer; or, with argv[2] "recv", reads
// everything argv[1] sends.
const sendScript = `import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=20)
if sys.argv[2] == "recv":
    n = 0
    while True:
        b = s.recv(1 << 16)
        if not b:
            break
        n += len(b)
    print(n)
else:
    s.sendall(bytes(int(sys.argv[2])))
    s.shutdown(socket.SHUT_WR)
    print(s.recv(100).decode())
`

// TestUsage: through the daemon, on each runtime, a sandbox burning one
// CPU reports about one core and an idle one next to none; holding 200 MB
// of memory shows in its memory and peak; writing 50 MiB moves its disk
// by that much, and 3 MB sent to and 2 MB received from a test host move
// its network counters by as much; the samples the node kept come back
// with ?since=; `hearth top --json` lists the caller's sandboxes with
// their usage, and an agent's token sees neither another's sandboxes there
// nor their usage.
func TestUsage(t *testing.T) {
	requireDaemon(t)
	forEachRuntime(t, func(t *testing.T, runtime string) {
		d := newDaemon(t, runtime, "--usage-interval", "500ms", "--sandbox-metrics")
		ctx := ctxT(t)
		host := drivertest.NewTestHost(t, netip.MustParseAddr("203.0.113.21"), 8110)
		sink := host.Serve(t, 8111, drivertest.SinkServer)
		source := host.Serve(t, 8112, drivertest.SendServer, "2000000")
		cl := d.Client()
		for _, name := range []string{"busy", "idle"} {
			if _, _, err := cl.Create(ctx, sandbox.CreateRequest{Name: name, Network: sandbox.NetworkEgress}); err != nil {
				t.Fatal(err)
			}
		}
		began := time.Now()
		base, err := cl.Usage(ctx, "busy", time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		d.sh(ctx, "busy", "nohup python3 -c 'while True: pass' >/dev/null 2>&1 &")
		d.sh(ctx, "busy", `nohup python3 -c 'import time; b = bytearray(200 << 20); time.sleep(600)' >/dev/null 2>&1 & sleep 2`)
		d.sh(ctx, "busy", "head -c 52428800 /dev/urandom > /home/sandbox/big")
		d.sh(ctx, "busy", "python3 -c '"+sendScript+"' "+sink+" 3000000")
		if got := d.sh(ctx, "busy", "python3 -c '"+sendScript+"' "+source+" recv"); got != "2000000\n" {
			t.Fatalf("received %q from the test host, want 2000000", got)
		}
		time.Sleep(2 * time.Second) // samples of the burning CPU

		u, err := cl.Usage(ctx, "busy", began)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("busy: %.2f cores, %d MiB (working set %d, peak %d), disk %d MiB, net in %d out %d, %d processes, %d samples",
			u.CPUCores, u.MemoryBytes>>20, u.MemoryWorkingSetBytes>>20, u.MemoryPeakBytes>>20, u.DiskBytes>>20, u.NetRxBytes, u.NetTxBytes, u.Processes, len(u.Series))
		if u.CPUCores < 0.5 || u.CPUCores > 1.25 {
			t.Errorf("a sandbox burning one CPU (its quota is one) reports %.2f cores, want about 1", u.CPUCores)
		}
		if grew := u.MemoryBytes - base.MemoryBytes; grew < 190<<20 || u.MemoryPeakBytes < u.MemoryBytes {
			t.Errorf("holding 200 MB, memory went from %d to %d bytes (peak %d); want ≥ 190 MiB more, the peak at least as high", base.MemoryBytes, u.MemoryBytes, u.MemoryPeakBytes)
		}
		// The 200 MB are the working set too; the 50 MiB file the
		// sandbox wrote is file cache, which the working set may leave
		// out but never adds.
		if grew := u.MemoryWorkingSetBytes - base.MemoryWorkingSetBytes; grew < 190<<20 || u.MemoryWorkingSetBytes > u.MemoryBytes {
			t.Errorf("holding 200 MB, the working set went from %d to %d bytes of %d; want ≥ 190 MiB more, never above the memory", base.MemoryWorkingSetBytes, u.MemoryWorkingSetBytes, u.MemoryBytes)
		}
		if grew := u.DiskBytes - base.DiskBytes; grew < 50<<20 || u.LimitDiskBytes != sandbox.Sizes()["small"].DiskBytes {
			t.Errorf("after writing 50 MiB, disk went from %d to %d bytes of %d; want ≥ 50 MiB more, of the small size's cap", base.DiskBytes, u.DiskBytes, u.LimitDiskBytes)
		}
		// Headers add about 5%; segments a loaded sandbox's TCP sends
		// again count too (one run under runsc, its CPU burning beside
		// the transfer, sent 3.82 MB for 3): up to half again is allowed,
		// short of the double a counter counted twice would show.
		if out := u.NetTxBytes - base.NetTxBytes; out < 3_000_000 || out > 3_000_000*3/2 {
			t.Errorf("after sending 3 MB, net out moved by %d bytes; want 3 MB and headers", out)
		}
		if in := u.NetRxBytes - base.NetRxBytes; in < 2_000_000 || in > 2_000_000*3/2 {
			t.Errorf("after receiving 2 MB, net in moved by %d bytes; want 2 MB and headers", in)
		}
		if u.Processes < 3 {
			t.Errorf("processes = %d, want the two python3 processes and the agent at least", u.Processes)
		}
		if len(u.Series) < 4 || u.Series[len(u.Series)-1].CPUCores < 0.5 {
			t.Errorf("the node kept %d samples since the start, the last at %+v; want several, the last burning a core", len(u.Series), u.Series)
		}
		idle, err := cl.Usage(ctx, "idle", time.Time{})
		if err != nil || idle.CPUCores > 0.2 {
			t.Errorf("the idle sandbox reports %.2f cores, %v; want next to none", idle.CPUCores, err)
		}

		// --sandbox-metrics: each sandbox's latest sample in /metrics.
		code, metrics := get(t, d.URL+"/metrics", d.Token)
		var mem, ws float64
		for line := range strings.Lines(metrics) {
			if v, ok := strings.CutPrefix(line, `hearth_sandbox_memory_bytes{tenant="system",sandbox="busy"} `); ok {
				mem, _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
			}
			if v, ok := strings.CutPrefix(line, `hearth_sandbox_memory_working_set_bytes{tenant="system",sandbox="busy"} `); ok {
				ws, _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
			}
		}
		if code != 200 || mem < 190<<20 || ws < 190<<20 || ws > mem || !strings.Contains(metrics, `hearth_sandbox_cpu_cores{tenant="system",sandbox="idle"}`) {
			t.Errorf("/metrics = %d, busy's memory %v (working set %v); want it with each sandbox's usage:\n%s", code, mem, ws, metrics)
		}

		out, stderr, code := d.CLI("", "top", "--json", "--sort", "memory")
		var top struct{ Sandboxes []sandbox.Usage }
		if err := json.Unmarshal([]byte(out), &top); code != 0 || err != nil || len(top.Sandboxes) != 2 || top.Sandboxes[0].Sandbox != "system/busy" || top.Sandboxes[0].MemoryBytes < 190<<20 {
			t.Errorf("hearth top --json --sort memory = %d %q %q (%v); want busy first, with its memory", code, out, stderr, err)
		}
		if out, _, code := d.CLI("", "top"); code != 0 || !strings.Contains(out, "SANDBOX") || !strings.Contains(out, "system/busy") || !strings.Contains(out, "system/idle") {
			t.Errorf("hearth top (not a terminal: one table) = %d %q", code, out)
		}
		tok := d.agentToken(t, "other", "nosy", 2)
		var none struct{ Sandboxes []sandbox.Usage }
		if out, _, code := d.CLIAs(tok, "", "top", "--json"); code != 0 || json.Unmarshal([]byte(out), &none) != nil || len(none.Sandboxes) != 0 {
			t.Errorf("hearth top --json as another tenant's agent = %d %q; want no sandbox", code, out)
		}
		if _, stderr, code := d.CLIAs(tok, "", "exec", "system/busy", "--", "true"); code != sandbox.CodeNotFound.ExitCode() {
			t.Errorf("the other agent reached busy: %d %q", code, stderr)
		}
		if _, err := client.New(d.URL, tok, nil).Usage(ctx, "system/busy", time.Time{}); !sandbox.IsCode(err, sandbox.CodeNotFound) {
			t.Errorf("usage of busy as another tenant's agent = %v, want not_found", err)
		}
	})
}
