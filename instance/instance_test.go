package instance_test

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hearth/hearth/instance"
)

// free is a host on which no departed instance left anything.
func free(instance.Names) (bool, error) { return false, nil }

// openIn opens the instance of data dir dir (created if need be) in
// registry reg with opts' other fields, on a free host; t's cleanup closes it.
func openIn(t *testing.T, reg, dir string, opts instance.Options) (*instance.Instance, error) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	opts.DataDir, opts.Registry = dir, reg
	inst, err := instance.OpenWith(opts, free)
	if err == nil {
		t.Cleanup(func() { inst.Close() })
	}
	return inst, err
}

// TestNamesOf: the default instance keeps the names of a daemon before
// instances; every slot's names fit the kernel's limits (chain names 28
// characters, ipset names 31, interface names 15 with the link prefix
// taking 4) and no two slots share a link prefix or addresses, nor any
// with the default instance.
func TestNamesOf(t *testing.T) {
	def := instance.NamesOf(instance.DefaultName, 0)
	want := instance.Names{Instance: "hearth", Network: "hearth", LinkPrefix: "hv", Subnet: netip.MustParsePrefix("10.89.0.0/16"), CgroupParent: "hearth"}
	if def != want || !def.Default() {
		t.Errorf("NamesOf(hearth, 0) = %+v, want %+v", def, want)
	}
	long := strings.Repeat("z", instance.MaxName)
	seen := []instance.Names{def}
	for slot := 1; slot <= instance.MaxSlot; slot++ {
		n := instance.NamesOf(long, slot)
		if n.Default() || n.Slot != slot || n.Network != "hearth-"+long || n.CgroupParent != "hearth-"+long {
			t.Errorf("NamesOf(%s, %d) = %+v", long, slot, n)
		}
		if l := len(strings.ToUpper(n.Network) + "-POSTROUTING"); l > 28 {
			t.Errorf("slot %d: chain names of %d characters, want at most 28", slot, l)
		}
		if l := len(n.Network + "-allow"); l > 31 {
			t.Errorf("slot %d: set names of %d characters, want at most 31", slot, l)
		}
		if len(n.LinkPrefix) != 4 || !strings.HasPrefix(n.LinkPrefix, "hx") || n.Subnet.Bits() != 21 || !netip.MustParsePrefix("10.90.0.0/15").Contains(n.Subnet.Addr()) {
			t.Errorf("slot %d: link prefix %q and subnet %v, want hx.. and a /21 of 10.90.0.0/15", slot, n.LinkPrefix, n.Subnet)
		}
		for _, o := range seen {
			if strings.HasPrefix(n.LinkPrefix, o.LinkPrefix) || strings.HasPrefix(o.LinkPrefix, n.LinkPrefix) || n.Subnet.Overlaps(o.Subnet) {
				t.Errorf("slot %d (%s, %v) meets slot %d (%s, %v)", slot, n.LinkPrefix, n.Subnet, o.Slot, o.LinkPrefix, o.Subnet)
			}
		}
		seen = append(seen, n)
	}
}

func TestCheckName(t *testing.T) {
	for _, name := range []string{"staging", "a", "h2", "abcdefghi"} {
		if err := instance.CheckName(name); err != nil {
			t.Errorf("CheckName(%q) = %v, want nil", name, err)
		}
	}
	for _, name := range []string{"", "abcdefghij", "Staging", "st-aging", "st_aging", "sta/ging", "stäging"} {
		if err := instance.CheckName(name); err == nil {
			t.Errorf("CheckName(%q) = nil, want an error", name)
		}
	}
}

// TestOpen: a new data dir's instance is named from its path, takes a
// slot, and keeps both across restarts (the record); another data dir's
// gets another name and slot; --instance names one; the default data dir
// and one made before instances are the default instance.
func TestOpen(t *testing.T) {
	reg, root := t.TempDir(), t.TempDir()
	a, err := openIn(t, reg, filepath.Join(root, "a"), instance.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Instance != instance.DerivedName(a.DataDir) || instance.CheckName(a.Instance) != nil || a.Default() || a.Slot < 1 || a.Moved {
		t.Errorf("Open(a) = %+v, want a name of its path and a slot", a)
	}
	if got, err := instance.Read(a.DataDir); err != nil || got != a.Names {
		t.Errorf("Read(a) = %+v, %v; want %+v", got, err, a.Names)
	}
	b, err := openIn(t, reg, filepath.Join(root, "b"), instance.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b.Instance == a.Instance || b.Slot == a.Slot {
		t.Errorf("Open(b) = %+v, shares with a's %+v", b.Names, a.Names)
	}
	named, err := openIn(t, reg, filepath.Join(root, "c"), instance.Options{Name: "staging"})
	if err != nil || named.Instance != "staging" || named.Network != "hearth-staging" {
		t.Errorf("Open(c, staging) = %+v, %v", named, err)
	}
	// A restart: the same name and slot, also with the name given.
	a.Close()
	again, err := openIn(t, reg, a.DataDir, instance.Options{Name: a.Instance})
	if err != nil || again.Names != a.Names || again.Moved {
		t.Errorf("Open(a) again = %+v, %v; want %+v", again, err, a.Names)
	}
	// A data dir made before instances is the default instance's.
	legacy := filepath.Join(root, "legacy")
	def, err := openIn(t, reg, legacy, instance.Options{Legacy: true})
	if err != nil || def.Names != instance.NamesOf(instance.DefaultName, 0) {
		t.Errorf("Open(legacy) = %+v, %v; want the default instance", def, err)
	}
	if got := instance.DerivedName(instance.DefaultDataDir); got != instance.DefaultName {
		t.Errorf("derivedName(%s) = %q, want %s", instance.DefaultDataDir, got, instance.DefaultName)
	}
}

// TestOpenRefuses: a name another data dir holds (its daemon running or
// not), a second daemon on a running data dir, a rename of a data dir's
// instance, a legacy data dir under another name, and a bad name; a
// claim whose data dir is gone frees its name and slot.
func TestOpenRefuses(t *testing.T) {
	reg, root := t.TempDir(), t.TempDir()
	first, err := openIn(t, reg, filepath.Join(root, "one"), instance.Options{Name: "staging"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openIn(t, reg, filepath.Join(root, "two"), instance.Options{Name: "staging"}); !errors.Is(err, instance.ErrInUse) {
		t.Errorf("Open(two, staging) while one runs = %v, want ErrInUse", err)
	}
	if _, err := openIn(t, reg, first.DataDir, instance.Options{}); !errors.Is(err, instance.ErrRunning) {
		t.Errorf("Open(one) while one runs = %v, want ErrRunning", err)
	}
	first.Close()
	if _, err := openIn(t, reg, filepath.Join(root, "two"), instance.Options{Name: "staging"}); !errors.Is(err, instance.ErrInUse) {
		t.Errorf("Open(two, staging) while one is stopped = %v, want ErrInUse", err)
	}
	if _, err := openIn(t, reg, first.DataDir, instance.Options{Name: "prod"}); !errors.Is(err, instance.ErrRenamed) {
		t.Errorf("Open(one, prod) = %v, want ErrRenamed", err)
	}
	if _, err := openIn(t, reg, filepath.Join(root, "old"), instance.Options{Legacy: true, Name: "prod"}); !errors.Is(err, instance.ErrRenamed) {
		t.Errorf("Open(a legacy data dir, prod) = %v, want ErrRenamed", err)
	}
	if _, err := openIn(t, reg, filepath.Join(root, "bad"), instance.Options{Name: "Bad-Name"}); err == nil {
		t.Errorf("Open(bad, Bad-Name) = nil, want an error")
	}
	// The data dir removed (a test's, at its end): its claim goes.
	if err := os.RemoveAll(first.DataDir); err != nil {
		t.Fatal(err)
	}
	two, err := openIn(t, reg, filepath.Join(root, "two"), instance.Options{Name: "staging"})
	if err != nil || two.Slot != first.Slot {
		t.Errorf("Open(two, staging) once one's data dir is gone = %+v, %v; want its name and slot %d", two, err, first.Slot)
	}
}

// TestSlots: no two instances get one slot, nor one whose names a
// departed instance left on the host; with every slot held, Open says so;
// an instance whose slot another took while it was away (its claim lost
// in a reboot) moves.
func TestSlots(t *testing.T) {
	reg, root := t.TempDir(), t.TempDir()
	away, err := openIn(t, reg, filepath.Join(root, "away"), instance.Options{})
	if err != nil {
		t.Fatal(err)
	}
	away.Close()
	// The reboot: the registry is empty again; another instance comes
	// first and finds the slot's link prefix used on the host.
	reg = t.TempDir()
	left := away.LinkPrefix
	uses := func(n instance.Names) (bool, error) { return n.LinkPrefix == left, nil }
	other, err := instance.OpenWith(instance.Options{DataDir: mkdir(t, root, "other"), Registry: reg, Name: "other"}, uses)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if other.Slot == away.Slot {
		t.Errorf("Open(other) took slot %d, whose link prefix %s is on the host", other.Slot, left)
	}
	// Its slot taken (the only one free for the taker), the first
	// instance moves.
	onlyAways := func(n instance.Names) (bool, error) { return n.Slot != away.Slot, nil }
	taker, err := instance.OpenWith(instance.Options{DataDir: mkdir(t, root, "taker"), Registry: reg, Name: "taker"}, onlyAways)
	if err != nil {
		t.Fatal(err)
	}
	defer taker.Close()
	if taker.Slot != away.Slot {
		t.Fatalf("Open(taker) took slot %d, want %d, the only one free", taker.Slot, away.Slot)
	}
	moved, err := openIn(t, reg, away.DataDir, instance.Options{})
	if err != nil || !moved.Moved || moved.Slot == away.Slot || moved.Instance != away.Instance {
		t.Errorf("Open(away) after its slot was taken = %+v, %v; want it moved", moved, err)
	}
	var held []*instance.Instance
	for i := 0; ; i++ {
		inst, err := openIn(t, reg, filepath.Join(root, "many", string(rune('a'+i/26))+string(rune('a'+i%26))), instance.Options{})
		if errors.Is(err, instance.ErrNoSlot) {
			break
		}
		if err != nil || i > instance.MaxSlot {
			t.Fatalf("Open() #%d = %v, want ErrNoSlot after %d", i, err, instance.MaxSlot)
		}
		held = append(held, inst)
	}
	if n := len(held) + 3; n != instance.MaxSlot {
		t.Errorf("%d instances held slots, want %d", n, instance.MaxSlot)
	}
}

func mkdir(t *testing.T, parts ...string) string {
	t.Helper()
	dir := filepath.Join(parts...)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestOpenThroughLink: a data dir reached through a symbolic link is the
// same instance as by its own path.
func TestOpenThroughLink(t *testing.T) {
	reg, root := t.TempDir(), t.TempDir()
	first, err := openIn(t, reg, filepath.Join(root, "real"), instance.Options{})
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	link := filepath.Join(root, "link")
	if err := os.Symlink(first.DataDir, link); err != nil {
		t.Fatal(err)
	}
	again, err := openIn(t, reg, link, instance.Options{})
	if err != nil || again.Names != first.Names || again.DataDir != first.DataDir {
		t.Errorf("Open(%s → %s) = %+v, %v; want %+v", link, first.DataDir, again, err, first.Names)
	}
}
