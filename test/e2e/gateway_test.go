package e2e_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/sandbox"
)

// gatewayClient is run in a sandbox: a GET of its first argument with the
// header Authorization: Bearer sandbox-placeholder (what an SDK that wants
// a key sends), printing the status, the X-Seen header and the body, or
// the HTTP error's status and body.
const gatewayClient = `import sys, urllib.request, urllib.error
req = urllib.request.Request(sys.argv[1], headers={"Authorization": "Bearer sandbox-placeholder"})
try:
    r = urllib.request.urlopen(req, timeout=10)
    print(r.status, r.headers.get("X-Seen"))
    sys.stdout.write(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, "-")
    sys.stdout.write(e.read().decode())
`

// TestCredentialGateway: a tenant's secret bound to an upstream (a test
// host of this test's) reaches it as a header through the egress gateway,
// while the sandbox, which asks http://NAME.hearth.internal with a
// placeholder key, sees the value nowhere: not in the answer (the upstream
// echoes the header; the gateway scrubs it), not on its disk, in its
// processes' environment or memory. A search that finds markers the test
// put in the same places shows that it would find the value. A binding
// the tenant does not have is not_found; a sandbox with no network cannot
// reach the gateway.
func TestCredentialGateway(t *testing.T) {
	requireDaemon(t)
	forEachRuntime(t, func(t *testing.T, runtime string) {
		dns := drivertest.NewTestDNS(t, nil)
		d := newDaemon(t, runtime, "--dns-upstream", dns.String())
		upstream := drivertest.NewTestHost(t, netip.MustParseAddr("203.0.113.23"), 8096)
		seenFile := filepath.Join(t.TempDir(), "seen")
		target := upstream.Serve(t, 8097, drivertest.HeaderServer, "Authorization", seenFile)

		value := "hk-" + randomHex(t, 16)
		tok := d.agentToken(t, "acme", "coder", 4)
		if _, err := d.Client().Admin().SetSecret(ctxT(t), "acme", "UPSTREAM_KEY", value); err != nil {
			t.Fatal(err)
		}
		if out, stderr, code := d.CLI("", "binding", "set", "api", "--tenant", "acme", "--secret", "UPSTREAM_KEY", "--upstream", "http://"+target+"/v1"); code != 0 || !strings.Contains(out, "api") {
			t.Fatalf("hearth binding set = %d %q %q", code, out, stderr)
		}
		for _, args := range [][]string{{"create", "gw", "--network", "egress"}, {"create", "closed"}} {
			if _, stderr, code := d.CLIAs(tok, "", args...); code != 0 {
				t.Fatalf("hearth %s = %d %q", strings.Join(args, " "), code, stderr)
			}
		}
		get := func(name, url string) string {
			t.Helper()
			out, stderr, code := d.CLIAs(tok, "", "exec", name, "--", "python3", "-c", gatewayClient, url)
			if code != 0 {
				return "exit " + strconv.Itoa(code) + ": " + stderr
			}
			return out
		}

		// The upstream echoes the whole header, which the gateway scrubs.
		masked := "[secret UPSTREAM_KEY]"
		want := "200 " + masked + "\npath=/v1/models?limit=2\nAuthorization=" + masked + "\n"
		if got := get("gw", "http://api."+sandbox.GatewayDomain+"/models?limit=2"); got != want {
			t.Errorf("through the gateway, the sandbox got %q, want %q", got, want)
		}
		seen, _ := os.ReadFile(seenFile)
		if want := "/v1/models?limit=2 Bearer " + value + "\n"; string(seen) != want {
			t.Errorf("the upstream saw %q, want %q (the real header, the placeholder replaced)", seen, want)
		}
		if got := get("gw", "http://nope."+sandbox.GatewayDomain+"/"); !strings.HasPrefix(got, "404 -\n") || !strings.Contains(got, `"not_found"`) || !strings.Contains(got, `no binding \"nope\"`) {
			t.Errorf("an unknown binding: %q, want 404 not_found naming it", got)
		}
		if got := get("closed", "http://api."+sandbox.GatewayDomain+"/models"); !strings.HasPrefix(got, "exit 1:") {
			t.Errorf("a sandbox with no network reached the gateway: %q", got)
		}

		// The search, tried on markers first: one only in a process's
		// memory (joined there from two halves), one in its environment,
		// one in a file.
		sb, err := client.New(d.URL, tok, nil).Get(ctxT(t), "gw")
		if err != nil {
			t.Fatal(err)
		}
		mem1, mem2, envMark, diskMark := "ctl-"+randomHex(t, 8), randomHex(t, 8), "ctlenv-"+randomHex(t, 12), "ctldisk-"+randomHex(t, 12)
		if _, stderr, code := d.CLIAs(tok, "", "exec", "gw", "--", "sh", "-c", "echo "+diskMark+" > /tmp/ctl"); code != 0 {
			t.Fatal(stderr)
		}
		holder := exec.Command(bins.Hearth, "exec", "gw", "--env", "CTL="+envMark, "--", "python3", "-c",
			"import sys, time\nm = (sys.argv[1] + sys.argv[2]).encode()\nprint('ready', flush=True)\ntime.sleep(120)", mem1, mem2)
		holder.Env = append(os.Environ(), "HEARTH_URL="+d.URL, "HEARTH_TOKEN="+tok)
		out, err := holder.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := holder.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
		if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
			t.Fatalf("the marker holder said %q, %v", line, err)
		}
		for _, mark := range []string{mem1 + mem2, envMark, diskMark, value} {
			found := traces(t, d.DataDir, sb.ID, []byte(mark))
			t.Logf("%s found in %d places: %q", mark, len(found), found)
			if mark == value {
				if len(found) > 0 {
					t.Errorf("the secret's value is in the sandbox: %q", found)
				}
			} else if len(found) == 0 {
				t.Errorf("the search found no trace of the marker %s: it would miss the value too", mark)
			}
		}
	})
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// traces returns where needle is in what the sandbox with id holds: the
// files under dataDir (its root lives there; files over 256 MiB, the layer
// store's image, are skipped), and the environment, open memory files
// (gVisor keeps a sandbox's memory in one) and readable memory (not of
// gVisor's processes) of every process in the sandbox's cgroup or naming
// its id on its command line.
func traces(t *testing.T, dataDir, id string, needle []byte) []string {
	t.Helper()
	var found []string
	filepath.WalkDir(dataDir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return nil
		}
		if info, err := e.Info(); err != nil || info.Size() > 256<<20 {
			return nil
		}
		if f, err := os.Open(path); err == nil {
			if readerHolds(f, needle) {
				found = append(found, path)
			}
			f.Close()
		}
		return nil
	})
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cg, _ := os.ReadFile(p + "/cgroup")
		cmd, _ := os.ReadFile(p + "/cmdline")
		// The sandbox's cgroup is <parent>/<id>, the parent its
		// daemon's instance's.
		if !bytes.Contains(cg, []byte("/"+id+"\n")) && !bytes.Contains(cmd, []byte(id)) {
			continue
		}
		if env, _ := os.ReadFile(p + "/environ"); bytes.Contains(env, needle) {
			found = append(found, p+"/environ")
		}
		fds, _ := filepath.Glob(p + "/fd/*")
		for _, fd := range fds {
			if link, _ := os.Readlink(fd); !strings.HasPrefix(link, "/memfd:") {
				continue
			}
			if f, err := os.Open(fd); err == nil {
				if dataHolds(f, needle) {
					found = append(found, fd)
				}
				f.Close()
			}
		}
		// gVisor's own processes (and the stubs the sentry runs the
		// application in, which have no command line) are searched
		// through the memory file alone: reading their address spaces
		// disturbs the sandbox.
		if len(cmd) > 0 && !bytes.HasPrefix(cmd, []byte("runsc-")) && regionsContain(p, needle) {
			found = append(found, p+"/mem")
		}
	}
	return found
}

// dataHolds reports whether the data of sparse file f (its extents
// between holes, as SEEK_DATA and SEEK_HOLE find them) holds needle; at
// most 4 GiB of it is read.
func dataHolds(f *os.File, needle []byte) bool {
	const seekData, seekHole = 3, 4
	budget := int64(4 << 30)
	for off := int64(0); budget > 0; {
		data, err := f.Seek(off, seekData)
		if err != nil {
			return false
		}
		hole, err := f.Seek(data, seekHole)
		if err != nil || hole <= data {
			return false
		}
		n := min(hole-data, budget)
		budget -= n
		if readerHolds(io.NewSectionReader(f, data, n), needle) {
			return true
		}
		off = hole
	}
	return false
}

// regionsContain reports whether a readable mapping of process dir
// (/proc/PID) holds needle; at most 4 GiB of it is read.
func regionsContain(dir string, needle []byte) bool {
	maps, err := os.ReadFile(dir + "/maps")
	if err != nil {
		return false
	}
	mem, err := os.Open(dir + "/mem")
	if err != nil {
		return false
	}
	defer mem.Close()
	budget := int64(4 << 30)
	for line := range strings.Lines(string(maps)) {
		f := strings.Fields(line)
		if len(f) < 2 || f[1][0] != 'r' || strings.HasSuffix(line, "[vvar]\n") || strings.HasSuffix(line, "[vvar_vclock]\n") {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		n := min(int64(end-start), budget)
		budget -= n
		if readerHolds(io.NewSectionReader(mem, int64(start), n), needle) {
			return true
		}
		if budget <= 0 {
			return false
		}
	}
	return false
}

// readerHolds reports whether r holds needle, reading it in 1 MiB chunks
// (a read error ends the search).
func readerHolds(r io.Reader, needle []byte) bool {
	buf := make([]byte, 1<<20+len(needle))
	keep := 0
	for {
		n, err := r.Read(buf[keep:])
		if bytes.Contains(buf[:keep+n], needle) {
			return true
		}
		if err != nil {
			return false
		}
		total := keep + n
		keep = min(len(needle)-1, total)
		copy(buf, buf[total-keep:total])
	}
}
