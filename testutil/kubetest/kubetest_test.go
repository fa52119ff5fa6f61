package kubetest_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/testutil/kubetest"
)

// TestMain stops the control plane after every test.
func TestMain(m *testing.M) {
	code := m.Run()
	kubetest.Stop()
	os.Exit(code)
}

// TestVersion: the package runs the release tools/kube builds.
func TestVersion(t *testing.T) {
	mod, err := os.ReadFile(filepath.Join("..", "..", "tools", "kube", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mod), "require k8s.io/kubernetes "+kubetest.Version+"\n") {
		t.Fatalf("tools/kube/go.mod does not require k8s.io/kubernetes %s", kubetest.Version)
	}
}

// TestControlPlane: the API server answers the admin's kubectl with its
// release; a namespace and a pod made through it are there to read back;
// the scheduler, with no node to place it on, reports the pod
// unschedulable (it runs and watches).
func TestControlPlane(t *testing.T) {
	c := kubetest.Start(t, kubetest.Options{Scheduler: true})
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(filepath.Join(c.Bin, "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if v := kubectl("version", "-o", "json"); !strings.Contains(v, `"gitVersion": "`+kubetest.Version+`"`) {
		t.Errorf("kubectl version = %s; want the server at %s", v, kubetest.Version)
	}
	// The control plane lives as long as the test binary: a namespace of
	// this run's own.
	ns := fmt.Sprintf("hearth-t%d", time.Now().UnixNano())
	kubectl("create", "namespace", ns)
	kubectl("-n", ns, "run", "p", "--image=hearth/default", "--restart=Never")
	if got := kubectl("-n", ns, "get", "pod", "p", "-o", "jsonpath={.metadata.namespace}/{.metadata.name}"); got != ns+"/p" {
		t.Fatalf("the pod read back = %q", got)
	}
	for i := 0; ; i++ {
		cond := kubectl("-n", ns, "get", "pod", "p", "-o", "jsonpath={.status.conditions[?(@.type=='PodScheduled')].reason}")
		if cond == "Unschedulable" {
			break
		}
		if i == 300 {
			t.Fatalf("after 30s the scheduler has not looked at the pod (PodScheduled reason %q)", cond)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
