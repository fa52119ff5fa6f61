package oci_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hearth/hearth/driver/oci"
)

// TestResumeLeftQuiet: at recovery a quiet agent is resumed (its socket
// gone), and so is one a memory checkpoint was quieting when the daemon
// died (the quiet marker there), even with its socket still there: the
// checkpoint's signal may arrive later, and the marker makes the agent
// ignore it. An agent listening with no checkpoint under way is left alone.
func TestResumeLeftQuiet(t *testing.T) {
	d, err := oci.New(oci.Options{Runtime: oci.RuntimeRunsc, Binary: "/bin/true", StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, id              string
		socketDir, socket     bool
		quieting, wantResumed bool
	}{
		{"listening", "xlistening", true, true, false, false},
		{"quiet", "xquiet", true, false, false, true},
		{"quieting, socket still there", "xquieting", true, true, true, true},
		{"quieting, socket gone", "xquietinggone", true, false, true, true},
		{"no socket directory", "xnorun", false, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := tc.id
			dir := filepath.Join(d.StateDir(), "sandboxes", id)
			run := filepath.Join(dir, "run")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if tc.socketDir {
				if err := os.Mkdir(run, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			if tc.socket {
				if err := os.WriteFile(filepath.Join(run, oci.SocketName), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if tc.quieting {
				if err := os.WriteFile(filepath.Join(dir, "quiet"), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			d.ResumeLeftQuiet(id)
			_, err := os.Stat(filepath.Join(run, "resume"))
			if resumed := err == nil; resumed != tc.wantResumed {
				t.Errorf("resume marker written = %v, want %v", resumed, tc.wantResumed)
			}
			if _, err := os.Stat(filepath.Join(dir, "quiet")); err == nil {
				t.Error("the quiet marker is still there")
			}
		})
	}
}
