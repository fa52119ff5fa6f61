// Package kubernetes_test checks hearth's install base, the kustomization
// in this directory, against a real API server (testutil/kubetest): what
// it renders, that the server takes it (server-side dry run), and that its
// roles grant each daemon what it uses and nothing more.
package kubernetes_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hearth/hearth/secrets"
	"github.com/hearth/hearth/testutil/kubetest"
)

// TestMain stops the control plane after every test.
func TestMain(m *testing.M) {
	code := m.Run()
	kubetest.Stop()
	os.Exit(code)
}

// TestRender: the base renders to exactly hearth's objects, each in its
// namespace, with the image kustomize sets. The control plane is
// unprivileged and touches nothing of the host; the node daemon is
// privileged, on the host's network, with exactly its four host paths, on
// the machines the operator labels. No argument carries the store's URL.
func TestRender(t *testing.T) {
	c := kubetest.Start(t, kubetest.Options{})
	objs := render(t, c)

	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.Kind]++
	}
	want := map[string]int{
		"Namespace": 1, "ServiceAccount": 2, "ClusterRole": 2, "ClusterRoleBinding": 2,
		"Role": 1, "RoleBinding": 1, "Deployment": 1, "DaemonSet": 1, "Service": 1,
	}
	if !maps.Equal(kinds, want) {
		t.Errorf("kinds rendered = %v, want %v", kinds, want)
	}

	// The lease Role lives where leases do; kustomize's namespace: field
	// would move it, which this catches.
	wantNS := map[string]string{
		"ServiceAccount": "hearth", "Deployment": "hearth", "DaemonSet": "hearth",
		"Service": "hearth", "Role": "kube-node-lease", "RoleBinding": "kube-node-lease",
	}
	for _, o := range objs {
		if o.Metadata.Namespace != wantNS[o.Kind] {
			t.Errorf("%s %s: namespace = %q, want %q", o.Kind, o.Metadata.Name, o.Metadata.Namespace, wantNS[o.Kind])
		}
	}

	cp := find(t, objs, "Deployment", "hearth-control-plane")
	if r := cp.Spec.Replicas; r == nil || *r != 2 {
		t.Errorf("Deployment replicas = %v, want 2", r)
	}
	pod := cp.Spec.Template.Spec
	if pod.HostNetwork || pod.HostPID || pod.HostIPC {
		t.Errorf("Deployment: hostNetwork, hostPID, hostIPC = %v, %v, %v, want none", pod.HostNetwork, pod.HostPID, pod.HostIPC)
	}
	if hp := hostPaths(pod); len(hp) != 0 {
		t.Errorf("Deployment host paths = %v, want none", hp)
	}
	for _, ctr := range pod.Containers {
		sc := ctr.SecurityContext
		if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("Deployment container %s: want privileged and allowPrivilegeEscalation set false", ctr.Name)
		}
	}

	node := find(t, objs, "DaemonSet", "hearth-node")
	pod = node.Spec.Template.Spec
	if !pod.HostNetwork || pod.HostPID {
		t.Errorf("DaemonSet hostNetwork, hostPID = %v, %v, want true, false", pod.HostNetwork, pod.HostPID)
	}
	if got := pod.NodeSelector["hearth.dev/sandbox-host"]; got != "true" {
		t.Errorf(`DaemonSet nodeSelector[hearth.dev/sandbox-host] = %q, want "true"`, got)
	}
	for _, ctr := range pod.Containers {
		if sc := ctr.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
			t.Errorf("DaemonSet container %s is not privileged", ctr.Name)
		}
	}
	wantHost := map[string]string{
		"/var/lib/hearth": "/var/lib/hearth", "/run/hearth": "/run/hearth",
		"/sys/fs/cgroup": "/sys/fs/cgroup", "/dev": "/dev",
	}
	if hp := hostPaths(pod); !maps.Equal(hp, wantHost) {
		t.Errorf("DaemonSet host paths (mount: host) = %v, want %v", hp, wantHost)
	}

	for _, w := range []object{cp, node} {
		for _, ctr := range w.Spec.Template.Spec.Containers {
			if ctr.Image != "hearth:latest" {
				t.Errorf("%s container %s: image = %q, want hearth:latest", w.Kind, ctr.Name, ctr.Image)
			}
			for _, a := range ctr.Args {
				if strings.Contains(a, "HEARTH_STORE") {
					t.Errorf("%s container %s: argument %q names the store's URL, which would show in process lists", w.Kind, ctr.Name, a)
				}
			}
		}
	}
}

// TestDryRun: in the namespace made for real, the API server takes the
// base (kubectl apply --dry-run=server -k) and the two Secrets as
// README.md has the operator make them; those Secrets hold every key the
// workloads read, through the environment or through --key-file.
func TestDryRun(t *testing.T) {
	c := kubetest.Start(t, kubetest.Options{})
	kubectl(t, c, "", "apply", "-f", "namespace.yaml")
	kubectl(t, c, "", "apply", "--dry-run=server", "-k", ".")

	key := filepath.Join(t.TempDir(), "secrets.key")
	if err := secrets.CreateKey(key, false); err != nil {
		t.Fatal(err)
	}
	made := map[string]object{}
	for _, args := range [][]string{
		{"hearth-store", "--from-literal=url=postgres://hearth:PASS@postgres.example:5432/hearth?sslmode=verify-full"},
		{"hearth-key", "--from-file=" + key},
	} {
		out := kubectl(t, c, "", append([]string{"-n", "hearth", "create", "secret", "generic", "--dry-run=server", "-o", "json"}, args...)...)
		var s object
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("kubectl create secret %s -o json: %v\n%s", args[0], err, out)
		}
		made[s.Metadata.Name] = s
	}
	has := func(secret, key string) bool {
		_, ok := made[secret].Data[key]
		return ok
	}

	for _, w := range workloads(render(t, c)) {
		pod := w.Spec.Template.Spec
		for _, ctr := range pod.Containers {
			for _, e := range ctr.Env {
				if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					continue
				}
				if ref := e.ValueFrom.SecretKeyRef; !has(ref.Name, ref.Key) {
					t.Errorf("%s env %s reads key %q of Secret %s, which the operator's Secret lacks", w.Kind, e.Name, ref.Key, ref.Name)
				}
			}
			file := flagValue(ctr.Args, "--key-file")
			secret := secretMountedAt(pod, ctr, path.Dir(file))
			if secret == "" || !has(secret, path.Base(file)) {
				t.Errorf("%s: --key-file=%s is no key of a Secret mounted at %s (Secret %q)", w.Kind, file, path.Dir(file), secret)
			}
		}
	}
}

// TestRBAC: each role grants exactly what its daemon uses, with no
// wildcard; and, the roles applied for real, the API server's authorizer
// answers the questions that matter as least privilege wants: the control
// plane may run pods in a tenant's namespace but read no Secret, exec into
// no pod and bind no role; the node may update its pods' status, resize
// them and create them (its forks'), and its lease, but make no namespace,
// set no quota, write no Secret and touch no lease outside
// kube-node-lease.
func TestRBAC(t *testing.T) {
	c := kubetest.Start(t, kubetest.Options{})

	want := map[string]map[string]string{
		"ClusterRole hearth-control-plane": {
			"pods":           "create delete get list watch",
			"namespaces":     "create get list update watch",
			"resourcequotas": "create delete get list patch update watch",
			"nodes":          "get list patch watch",
		},
		"ClusterRole hearth-node": {
			"nodes":        "create delete get list patch update watch",
			"nodes/status": "patch update",
			"pods":         "create delete get list watch",
			"pods/status":  "patch update",
			"pods/resize":  "patch update",
			"events":       "create patch",
			"configmaps":   "get list watch",
			"secrets":      "get list watch",
			"services":     "get list watch",
			"subjectaccessreviews.authorization.k8s.io": "create",
		},
		"Role kube-node-lease/hearth-node": {
			"leases.coordination.k8s.io": "create get patch update",
		},
	}
	got := map[string]map[string]string{}
	for _, o := range render(t, c) {
		if o.Kind != "ClusterRole" && o.Kind != "Role" {
			continue
		}
		name := o.Kind + " " + path.Join(o.Metadata.Namespace, o.Metadata.Name)
		g, err := grants(o.Rules)
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		got[name] = g
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s rendered, want none", name)
		}
	}
	for name, w := range want {
		if g := got[name]; !maps.Equal(g, w) {
			t.Errorf("%s grants = %v, want %v", name, g, w)
		}
	}

	kubectl(t, c, "", "apply", "-f", "namespace.yaml")
	kubectl(t, c, "", "apply", "-f", "rbac.yaml")
	const tenant = "hearth-acme"
	for _, tc := range []struct {
		as, verb, resource, sub, ns string // ns "": every namespace
		want                        bool
	}{
		{"hearth-control-plane", "create", "pods", "", tenant, true},
		{"hearth-control-plane", "delete", "pods", "", tenant, true},
		{"hearth-control-plane", "get", "secrets", "", "hearth", false},
		{"hearth-control-plane", "list", "secrets", "", "", false},
		{"hearth-control-plane", "create", "pods", "exec", tenant, false},
		{"hearth-control-plane", "create", "rolebindings", "", tenant, false},
		{"hearth-control-plane", "delete", "namespaces", "", "", false},
		{"hearth-control-plane", "delete", "resourcequotas", "", tenant, true},
		{"hearth-control-plane", "patch", "nodes", "", "", true},
		{"hearth-control-plane", "delete", "nodes", "", "", false},
		{"hearth-node", "list", "pods", "", "", true},
		{"hearth-node", "list", "nodes", "", "", true},
		{"hearth-node", "create", "pods", "", tenant, true},
		{"hearth-node", "update", "pods", "resize", tenant, true},
		{"hearth-node", "create", "namespaces", "", "", false},
		{"hearth-node", "update", "resourcequotas", "", tenant, false},
		{"hearth-node", "update", "pods", "status", tenant, true},
		{"hearth-node", "create", "pods", "exec", tenant, false},
		{"hearth-node", "create", "secrets", "", tenant, false},
		{"hearth-node", "create", "nodes", "", "", true},
		{"hearth-node", "create", "subjectaccessreviews.authorization.k8s.io", "", "", true},
		{"hearth-node", "create", "tokenreviews.authentication.k8s.io", "", "", false},
		{"hearth-node", "update", "leases.coordination.k8s.io", "", "kube-node-lease", true},
		{"hearth-node", "update", "leases.coordination.k8s.io", "", "kube-system", false},
	} {
		args := []string{"auth", "can-i", tc.verb, tc.resource, "--as=system:serviceaccount:hearth:" + tc.as}
		if tc.sub != "" {
			args = append(args, "--subresource="+tc.sub)
		}
		if tc.ns == "" {
			args = append(args, "--all-namespaces")
		} else {
			args = append(args, "-n", tc.ns)
		}
		if got := canI(t, c, args...); got != tc.want {
			t.Errorf("kubectl %s = %v, want %v", strings.Join(args, " "), got, tc.want)
		}
	}
}

// object is the part of a Kubernetes object these tests read.
type object struct {
	Kind     string
	Metadata struct{ Name, Namespace string }
	Rules    []rule            // ClusterRole, Role
	Data     map[string]string // Secret
	Spec     struct {          // Deployment, DaemonSet
		Replicas *int
		Template struct{ Spec podSpec }
	}
}

type rule struct {
	APIGroups, Resources, Verbs, ResourceNames, NonResourceURLs []string
}

type podSpec struct {
	HostNetwork, HostPID, HostIPC bool
	NodeSelector                  map[string]string
	Containers                    []container
	Volumes                       []struct {
		Name     string
		HostPath *struct{ Path string }
		Secret   *struct{ SecretName string }
	}
}

type container struct {
	Name, Image string
	Args        []string
	Env         []struct {
		Name      string
		ValueFrom *struct {
			SecretKeyRef *struct{ Name, Key string }
		}
	}
	SecurityContext *struct{ Privileged, AllowPrivilegeEscalation *bool }
	VolumeMounts    []struct{ Name, MountPath string }
}

// kubectl runs the cluster's kubectl as the admin, with stdin, and returns
// its standard output; when kubectl fails it fails t with all it printed.
func kubectl(t *testing.T, c *kubetest.Cluster, stdin string, args ...string) string {
	t.Helper()
	out, err := run(c, stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// run runs kubectl as kubectl does; its error carries stderr.
func run(c *kubetest.Cluster, stdin string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(c.Bin, "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out) + stderr.String(), err
	}
	return string(out), nil
}

// canI is kubectl auth can-i's answer; it fails t when there is none.
func canI(t *testing.T, c *kubetest.Cluster, args ...string) bool {
	t.Helper()
	out, err := run(c, "", args...)
	switch answer := strings.TrimSpace(out); {
	case err == nil && answer == "yes":
		return true
	case answer == "no": // exit status 1
		return false
	}
	t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	return false
}

// render returns the base's objects: kubectl kustomize's YAML, turned to
// JSON by kubectl itself (a client-side dry run, which defaults nothing).
func render(t *testing.T, c *kubetest.Cluster) []object {
	t.Helper()
	y := kubectl(t, c, "", "kustomize", ".")
	js := kubectl(t, c, y, "create", "--dry-run=client", "-o", "json", "-f", "-")
	var objs []object
	for d := json.NewDecoder(strings.NewReader(js)); ; {
		var o object
		if err := d.Decode(&o); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("the rendered base as JSON: %v", err)
		}
		objs = append(objs, o)
	}
}

// find returns the object of kind and name, or fails t.
func find(t *testing.T, objs []object, kind, name string) object {
	t.Helper()
	for _, o := range objs {
		if o.Kind == kind && o.Metadata.Name == name {
			return o
		}
	}
	t.Fatalf("no %s %s rendered", kind, name)
	return object{}
}

// workloads are the Deployments and DaemonSets of objs.
func workloads(objs []object) []object {
	return slices.DeleteFunc(objs, func(o object) bool { return o.Kind != "Deployment" && o.Kind != "DaemonSet" })
}

// hostPaths maps each of pod's mounts of a host path to that path.
func hostPaths(pod podSpec) map[string]string {
	m := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath == nil {
			continue
		}
		for _, ctr := range pod.Containers {
			for _, vm := range ctr.VolumeMounts {
				if vm.Name == v.Name {
					m[vm.MountPath] = v.HostPath.Path
				}
			}
		}
	}
	return m
}

// secretMountedAt is the Secret ctr mounts at dir, or "".
func secretMountedAt(pod podSpec, ctr container, dir string) string {
	for _, vm := range ctr.VolumeMounts {
		if vm.MountPath != dir {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == vm.Name && v.Secret != nil {
				return v.Secret.SecretName
			}
		}
	}
	return ""
}

// flagValue is the value of --name=value in args, or "".
func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// grants flattens rules to resource (with its API group, if not core) →
// its verbs, sorted and space-separated. A wildcard, a rule on
// non-resource URLs or one narrowed to resource names is an error: none
// belongs in hearth's roles.
func grants(rules []rule) (map[string]string, error) {
	verbs := map[string][]string{}
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 || len(r.ResourceNames) > 0 {
			return nil, errors.New("a rule on non-resource URLs or resource names")
		}
		for _, s := range slices.Concat(r.APIGroups, r.Resources, r.Verbs) {
			if strings.Contains(s, "*") {
				return nil, errors.New("a wildcard")
			}
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				if g != "" {
					res += "." + g
				}
				verbs[res] = append(verbs[res], r.Verbs...)
			}
		}
	}
	m := map[string]string{}
	for res, vs := range verbs {
		slices.Sort(vs)
		m[res] = strings.Join(slices.Compact(vs), " ")
	}
	return m, nil
}
