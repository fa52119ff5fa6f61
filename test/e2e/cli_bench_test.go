package e2e_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/benchstat"
)

// BenchmarkCLIExec is `hearth exec NAME -- true` in a running sandbox, as a
// script runs it (a new process per call), through the two builds of
// cmd/hearth: bin/hearth ("cli-"), which links no Kubernetes library, and
// hearth-kube ("cli-kube-"), which does, against the same exec through the
// Go client in this process ("client-"), the floor. The three alternate,
// per runtime, on one sandbox.
func BenchmarkCLIExec(b *testing.B) {
	forEachRuntimeB(b, func(b *testing.B, d *daemon) {
		ctx := context.Background()
		c := d.Client()
		if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "cli-bench"}); err != nil {
			b.Fatal(err)
		}
		env := append(os.Environ(), "HEARTH_URL="+d.URL, "HEARTH_TOKEN="+d.Token)
		cliTrue := func(bin string) time.Duration {
			start := time.Now()
			cmd := exec.Command(bin, "exec", "cli-bench", "--", "true")
			cmd.Env = env
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%s exec cli-bench -- true: %v\n%s", bin, err, out)
			}
			return time.Since(start)
		}
		var client, cli, cliKube latencies
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			start := time.Now()
			res, err := c.Exec(ctx, "cli-bench", sandbox.ExecRequest{Argv: []string{"true"}}, nil, io.Discard, io.Discard)
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("true = %+v, %v", res, err)
			}
			client = append(client, time.Since(start))
			cli = append(cli, cliTrue(bins.Hearth))
			cliKube = append(cliKube, cliTrue(filepath.Join(bins.Dir, "hearth-kube")))
		}
		benchstat.Report(b, "client-", client)
		benchstat.Report(b, "cli-", cli)
		benchstat.Report(b, "cli-kube-", cliKube)
	})
}
