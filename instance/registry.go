package instance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Options configure Open.
type Options struct {
	// DataDir is the daemon's data dir; it must exist. Claims know it by
	// its real path (links resolved).
	DataDir string
	// Name is the instance's name (`hearth serve --instance`; see
	// CheckName). Empty means the one the data dir records, else the
	// default instance's for DefaultDataDir or a Legacy data dir, else
	// one derived from the data dir's path. A name other than the one
	// the data dir records (or, for a Legacy one, the default) is
	// ErrRenamed: the sandboxes' objects carry the old one.
	Name string
	// Legacy says the data dir predates instances: it holds sandboxes but
	// no record, so their objects carry the default instance's names.
	Legacy bool
	// Registry is where instances are claimed; empty means
	// DefaultRegistry. Every daemon of the host must use the same.
	Registry string
}

// Instance is an instance claimed by Open: its names, its data dir, and
// its claim, held until Close.
type Instance struct {
	Names
	// DataDir is the data dir's real path.
	DataDir string
	// Moved is set when the slot the data dir recorded was another
	// instance's (claimed while this one's daemon was away, after a
	// reboot): the instance has another slot, so its sandboxes get new
	// addresses at their next start.
	Moved bool

	claim *os.File
}

// claimRecord is a claim file's content.
type claimRecord struct {
	DataDir string `json:"data_dir"`
	Slot    int    `json:"slot"`
}

// heldClaim is a claim another daemon or data dir holds.
type heldClaim struct {
	claimRecord
	// running is set while its daemon runs (it holds the claim's lock).
	running bool
}

// Open claims the instance of opts.DataDir (see the package doc) and
// records its name and slot there. It returns ErrInUse when another data
// dir holds the name, ErrRunning when another daemon runs on the data
// dir, ErrRenamed when Options.Name is not the data dir's instance, and
// ErrNoSlot when every slot is held. The claim holds until Close (the
// daemon's end); the record keeps the name and slot the data dir's.
func Open(opts Options) (*Instance, error) { return open(opts, hostUses) }

// open is Open, with uses telling whether a departed instance left links
// or rules of a slot's names on the host.
func open(opts Options, uses func(Names) (bool, error)) (*Instance, error) {
	abs, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("instance: data dir: %w", err)
	}
	// Claims and derived names know the data dir by its real path,
	// whichever link led to it; the default data dir is the default
	// instance's whatever it links to.
	dir, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("instance: data dir: %w", err)
	}
	nameDir := dir
	if abs == DefaultDataDir {
		nameDir = abs
	}
	name, err := nameFor(nameDir, opts)
	if err != nil {
		return nil, err
	}
	reg := opts.Registry
	if reg == "" {
		reg = DefaultRegistry
	}
	unlock, err := lockRegistry(reg)
	if err != nil {
		return nil, err
	}
	defer unlock()
	claims, err := readClaims(reg)
	if err != nil {
		return nil, err
	}
	if c, ok := claims[name]; ok {
		if c.DataDir != dir {
			return nil, fmt.Errorf("%w: instance %q is the data dir %s's (give this one another name with --instance)", ErrInUse, name, c.DataDir)
		}
		if c.running {
			return nil, fmt.Errorf("%w: %s (instance %q)", ErrRunning, dir, name)
		}
	}
	inst := &Instance{DataDir: dir}
	slot := 0
	if name != DefaultName {
		if slot, inst.Moved, err = chooseSlot(dir, name, claims, uses); err != nil {
			return nil, err
		}
	}
	inst.Names = NamesOf(name, slot)
	if inst.claim, err = claim(reg, name, claimRecord{DataDir: dir, Slot: slot}); err != nil {
		return nil, err
	}
	if r, err := readRecord(dir); err != nil || r != (record{name, slot}) {
		if err := writeRecord(dir, record{name, slot}); err != nil {
			inst.claim.Close()
			return nil, fmt.Errorf("instance: record: %w", err)
		}
	}
	return inst, nil
}

// Close releases the claim's lock: the daemon has stopped. The claim
// stays while the data dir records the instance.
func (i *Instance) Close() error { return i.claim.Close() }

// chooseSlot returns the slot of instance name of data dir dir: the one
// the data dir records, unless another claim holds it (moved), else the
// first free one from a hash of the name on, one no claim holds and
// whose link prefix and subnet nothing on the host uses.
func chooseSlot(dir, name string, claims map[string]heldClaim, uses func(Names) (bool, error)) (slot int, moved bool, err error) {
	held := map[int]string{}
	for n, c := range claims {
		if n != name {
			held[c.Slot] = n
		}
	}
	r, err := readRecord(dir)
	recorded := err == nil && r.Name == name
	if recorded && held[r.Slot] == "" {
		return r.Slot, false, nil
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	start := int(h.Sum32() % MaxSlot)
	for i := range MaxSlot {
		k := 1 + (start+i)%MaxSlot
		if held[k] != "" {
			continue
		}
		busy, err := uses(NamesOf(name, k))
		if err != nil {
			return 0, false, err
		}
		if !busy {
			return k, recorded, nil
		}
	}
	return 0, false, fmt.Errorf("%w: %d instances hold slots, and departed ones' links or rules hold the rest (stop and remove data dirs no longer used; a reboot frees what departed instances left)", ErrNoSlot, len(held))
}

// lockRegistry creates the registry if need be and locks it until the
// returned function is called.
func lockRegistry(reg string) (unlock func(), err error) {
	if err := os.MkdirAll(reg, 0o700); err != nil {
		return nil, fmt.Errorf("instance: registry: %w", err)
	}
	f, err := os.Open(reg)
	if err != nil {
		return nil, fmt.Errorf("instance: registry: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("instance: lock the registry: %w", err)
	}
	return func() { f.Close() }, nil
}

// readClaims returns the registry's claims that hold, by name, and
// removes those that do not: no daemon runs them, and their data dirs no
// longer record them (removed, or another instance's now).
func readClaims(reg string) (map[string]heldClaim, error) {
	entries, err := os.ReadDir(reg)
	if err != nil {
		return nil, fmt.Errorf("instance: registry: %w", err)
	}
	claims := map[string]heldClaim{}
	for _, e := range entries {
		if !e.Type().IsRegular() || CheckName(e.Name()) != nil {
			continue
		}
		path := filepath.Join(reg, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("instance: registry: %w", err)
		}
		var c heldClaim
		if err := json.Unmarshal(b, &c.claimRecord); err != nil {
			// A claim cut short: its daemon died before it wrote it.
			c = heldClaim{}
		}
		if c.running, err = locked(path); err != nil {
			return nil, err
		}
		r, rerr := readRecord(c.DataDir)
		if !c.running && (c.DataDir == "" || rerr != nil || r.Name != e.Name()) {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("instance: registry: %w", err)
			}
			continue
		}
		claims[e.Name()] = c
	}
	return claims, nil
}

// locked reports whether a daemon holds the lock of the claim at path.
func locked(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("instance: registry: %w", err)
	}
	defer f.Close()
	switch err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); {
	case err == nil:
		return false, nil
	case errors.Is(err, unix.EWOULDBLOCK):
		return true, nil
	default:
		return false, fmt.Errorf("instance: registry: %s: %w", path, err)
	}
}

// claim writes the claim of instance name and locks it; the returned file
// holds the lock until it is closed.
func claim(reg, name string, c claimRecord) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(reg, name), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("instance: claim: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s (instance %q)", ErrRunning, c.DataDir, name)
		}
		return nil, fmt.Errorf("instance: claim: %w", err)
	}
	b, err := json.Marshal(c)
	if err == nil {
		err = f.Truncate(0)
	}
	if err == nil {
		_, err = f.WriteAt(append(b, '\n'), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("instance: claim: %w", err)
	}
	return f, nil
}

// hostUses reports whether anything on this host uses n's link prefix or
// subnet: an interface whose name begins with the prefix or whose
// address is in the subnet, or an iptables rule naming either (what a
// departed instance left, whose rules would judge the new one's
// sandboxes).
func hostUses(n Names) (bool, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return false, fmt.Errorf("instance: interfaces: %w", err)
	}
	for _, ifc := range ifaces {
		if strings.HasPrefix(ifc.Name, n.LinkPrefix) {
			return true, nil
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			return false, fmt.Errorf("instance: addresses of %s: %w", ifc.Name, err)
		}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Overlaps(n.Subnet) {
				return true, nil
			}
		}
	}
	ipt, err := exec.LookPath("iptables")
	if err != nil || os.Geteuid() != 0 {
		return false, nil // no firewall rules to leave, or to read
	}
	for _, table := range []string{"filter", "nat"} {
		out, err := exec.Command(ipt, "-w", "-t", table, "-S").Output()
		if err != nil {
			return false, fmt.Errorf("instance: iptables -t %s -S: %w", table, err)
		}
		if bytes.Contains(out, []byte(" "+n.LinkPrefix+"+")) || bytes.Contains(out, []byte(" "+n.Subnet.String()+" ")) {
			return true, nil
		}
	}
	return false, nil
}
