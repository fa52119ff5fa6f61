package e2e_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hearth/hearth/sandbox"
)

// TestRuntimeFlag: `hearth serve --runtime-flag` reaches the runtime. The
// flag is one whose effect can be seen from outside: runsc's --debug-log
// writes its boot log into the directory named, runc's (and crun's)
// --debug puts debug entries in the sandbox's runtime log.
func TestRuntimeFlag(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, runtime string) {
		logs := t.TempDir()
		flag := "--debug"
		if runtime == "runsc" {
			flag = "--debug-log=" + logs + "/"
		}
		d := newDaemon(t, runtime, "--runtime-flag", flag)
		c := d.Client()
		ctx := context.Background()
		sb, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "flagged"})
		if err != nil {
			t.Fatal(err)
		}
		if res, err := c.Exec(ctx, "flagged", sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil); err != nil || res.ExitCode != 0 {
			t.Fatalf("exec true = %+v, %v", res, err)
		}
		if runtime == "runsc" {
			boot, _ := filepath.Glob(filepath.Join(logs, "*boot*"))
			if len(boot) == 0 {
				t.Fatalf("runsc wrote no boot log into %s: --runtime-flag %s did not reach it", logs, flag)
			}
			return
		}
		b, err := os.ReadFile(filepath.Join(d.DataDir, "oci", runtime, "sandboxes", sb.ID, "runtime.log"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"level":"debug"`) {
			t.Fatalf("%s's runtime log has no debug entry: --runtime-flag %s did not reach it:\n%s", runtime, flag, b)
		}
	})
}
