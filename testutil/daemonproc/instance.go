package daemonproc

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/instance"
	"github.com/hearth/hearth/internal/mountinfo"
	"github.com/hearth/hearth/network"
)

// Names returns the names of the daemon's instance, as its data dir
// records them.
func (d *Daemon) Names() (instance.Names, error) { return instance.Read(d.DataDir) }

// TearDown removes what the stopped daemon's instance keeps on the host
// after its last sandbox: its network's chains, jumps and sets (and any
// attachment left), and its cgroup parent in every hierarchy; then it
// wants nothing of the instance left (see Leftovers) but the mounts under
// the data dir, which the cleanup unmounts. The default instance is never
// torn down: it is the host's daemon's, not a test's.
func (d *Daemon) TearDown() {
	d.T.Helper()
	names, err := d.Names()
	if err != nil || names.Default() {
		if err != nil {
			d.T.Errorf("tear down the instance: %v", err)
		}
		return
	}
	h, err := network.New(network.Options{Name: names.Network, LinkPrefix: names.LinkPrefix, Subnet: names.Subnet, StateDir: filepath.Join(d.DataDir, "network")})
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err = h.Teardown(ctx)
	}
	if err != nil && !errors.Is(err, network.ErrUnavailable) {
		d.T.Errorf("tear down the instance's network: %v", err)
	}
	for _, dir := range cgroupDirs(d.T, names.CgroupParent) {
		if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
			d.T.Errorf("remove the instance's cgroup %s: %v", dir, err)
		}
	}
	for _, left := range Leftovers(d.T, names, d.DataDir) {
		if !strings.HasPrefix(left, "mount ") {
			d.T.Errorf("instance %s left after it was torn down: %s", names.Instance, left)
		}
	}
}

// Leftovers lists what of the instance names, whose data dir is dataDir,
// is on the host, one line each: processes in its cgroups or naming its
// data dir (not zombies, which the host's init reaps), mounts under the data dir, its network's objects (chains,
// jumps, sets, namespaces, links: drivertest.NetworkObjects), and its
// cgroup parent ("cgroup parent DIR") and the cgroups in it ("cgroup DIR")
// in every hierarchy. After its daemon stopped with every sandbox
// destroyed, what may be left is its network's chains, jumps and sets, its
// empty cgroup parent and the data dir's mounts (the layer store's loop
// mount, runsc's empty namespace), which TearDown and the cleanup remove.
func Leftovers(t testing.TB, names instance.Names, dataDir string) []string {
	t.Helper()
	var left []string
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cg, _ := os.ReadFile(p + "/cgroup")
		cmd, _ := os.ReadFile(p + "/cmdline")
		status, _ := os.ReadFile(p + "/status")
		if bytes.Contains(status, []byte("\nState:\tZ")) {
			continue // dead, waiting for the host's init to reap it
		}
		if bytes.Contains(cg, []byte(":/"+names.CgroupParent+"/")) || bytes.Contains(cmd, []byte(dataDir)) {
			left = append(left, "process "+filepath.Base(p)+" "+strings.ReplaceAll(string(cmd), "\x00", " "))
		}
	}
	points, err := mountinfo.Under(dataDir)
	if err != nil {
		t.Errorf("mounts under %s: %v", dataDir, err)
	}
	for _, p := range points {
		left = append(left, "mount "+p)
	}
	left = append(left, drivertest.NetworkObjects(t, names.Network, names.LinkPrefix)...)
	for _, dir := range cgroupDirs(t, names.CgroupParent) {
		left = append(left, "cgroup parent "+dir)
		filepath.WalkDir(dir, func(path string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() && path != dir {
				left = append(left, "cgroup "+path)
			}
			return nil
		})
	}
	return left
}

// cgroupDirs returns the cgroup parent's directory in every hierarchy
// where it exists (drivertest.CgroupDirs), and reports to t when the
// hierarchies cannot be read.
func cgroupDirs(t testing.TB, parent string) []string {
	t.Helper()
	dirs, err := drivertest.CgroupDirs(parent)
	if err != nil {
		t.Errorf("cgroup hierarchies: %v", err)
	}
	return dirs
}
