// Package instance names one daemon's share of a host, so that several
// daemons (production and staging, or a test run beside either), each
// with a data dir of its own, run side by side without touching each
// other's objects.
//
// An instance has a name and a slot. Its name, recorded in its data dir at
// its first start, names what the daemon makes outside its data dir: the
// network host's chains, sets, namespaces and log prefix
// (network.Options.Name) and the sandboxes' cgroup parent
// (oci.Options.CgroupParent). Its slot, recorded too, gives it addresses
// and link names no other instance has: the network host's subnet and
// link prefix (network.Options.Subnet, LinkPrefix). Everything else a
// daemon keeps lives under its data dir (the runtime's root, the layer
// store and its loop mount, runsc's empty namespace), and the DNS
// forwarder's and egress gateway's ports are bound at each start, so
// they need no name.
//
// The default instance, "hearth" in slot 0, is the data dir
// /var/lib/hearth's, and that of every data dir made before instances
// that still has sandboxes (Options.Legacy): its objects keep the names
// they had (chains HEARTH-…, namespaces hearth-<id>, links hv…, subnet
// 10.89.0.0/16, cgroups /hearth/<id>), so an upgraded daemon finds its
// own. Any other data dir's instance is named at its first start by
// Options.Name (`hearth serve --instance`) or, without one, by a hash of
// the data dir's path, and takes a free slot from 1 to MaxSlot: its
// objects are hearth-<name>-… and HEARTH-<NAME>-…, its links hx…, its
// subnet a /21 of 10.90.0.0/15.
//
// Open claims the instance in a registry every daemon of the host shares
// (/run/hearth/instances, which a reboot empties along with every kernel
// object the instances made): a claim is a file per name holding the data
// dir and the slot, locked (flock) while its daemon runs. A claim is held
// while its daemon runs or its data dir records it: a stopped instance's
// sandboxes keep running, and so do its chains, links and addresses.
// Open refuses a name another data dir holds, and a data dir another
// daemon runs on; it never gives out a slot another claim holds, nor one
// whose links or rules a departed instance left on the host.
package instance

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// Default instance: its name, and the data dir that is its without a
// record.
const (
	DefaultName    = "hearth"
	DefaultDataDir = "/var/lib/hearth"
)

// MaxName is the longest instance name: its chains are
// HEARTH-<NAME>-POSTROUTING, and the kernel allows 28 characters.
const MaxName = 9

// MaxSlot is the number of slots for instances other than the default
// one: /21s of 10.90.0.0/15.
const MaxSlot = 64

// DefaultRegistry is where Open claims instances unless Options.Registry
// says otherwise.
const DefaultRegistry = "/run/hearth/instances"

// recordFile is the instance's record in its data dir.
const recordFile = "instance"

// Errors Open returns, wrapped with the numbers and a hint.
var (
	// ErrInUse: another data dir holds the name.
	ErrInUse = errors.New("instance: the name belongs to another data dir")
	// ErrRunning: another daemon runs on the data dir.
	ErrRunning = errors.New("instance: another daemon runs on this data dir")
	// ErrRenamed: the data dir is another instance's.
	ErrRenamed = errors.New("instance: the data dir is another instance's")
	// ErrNoSlot: every slot is held.
	ErrNoSlot = errors.New("instance: no free slot")
)

var (
	defaultSubnet = netip.MustParsePrefix("10.89.0.0/16")
	slotRange     = netip.MustParsePrefix("10.90.0.0/15")
)

// slotBits is the prefix length of a slot's subnet.
const slotBits = 21

// Names are the names of an instance's objects outside its data dir.
type Names struct {
	// Instance is the instance's name; Slot its slot (0 for the
	// default instance).
	Instance string
	Slot     int
	// Network names the network host (network.Options.Name): "hearth"
	// or hearth-<name>.
	Network string
	// LinkPrefix begins its sandboxes' links: "hv", or "hx" and two
	// letters of the slot.
	LinkPrefix string
	// Subnet holds its sandboxes' addresses: 10.89.0.0/16, or the slot's
	// /21 of 10.90.0.0/15.
	Subnet netip.Prefix
	// CgroupParent holds its sandboxes' cgroups in every hierarchy:
	// "hearth" or hearth-<name>.
	CgroupParent string
}

// Default reports whether these are the default instance's names.
func (n Names) Default() bool { return n.Slot == 0 }

// NamesOf returns the names of instance name in slot (0 for the default
// instance, else 1 to MaxSlot). It does not check them.
func NamesOf(name string, slot int) Names {
	if slot == 0 {
		return Names{Instance: name, Network: DefaultName, LinkPrefix: "hv", Subnet: defaultSubnet, CgroupParent: DefaultName}
	}
	base := binary.BigEndian.Uint32(slotRange.Addr().AsSlice()) + uint32(slot-1)<<(32-slotBits)
	var a [4]byte
	binary.BigEndian.PutUint32(a[:], base)
	k := slot - 1
	return Names{
		Instance:     name,
		Slot:         slot,
		Network:      DefaultName + "-" + name,
		LinkPrefix:   "hx" + string(rune('a'+k/26)) + string(rune('a'+k%26)),
		Subnet:       netip.PrefixFrom(netip.AddrFrom4(a), slotBits),
		CgroupParent: DefaultName + "-" + name,
	}
}

// CheckName refuses a name that is not an instance's: 1 to MaxName
// lowercase letters and digits.
func CheckName(name string) error {
	ok := name != "" && len(name) <= MaxName
	for _, c := range name {
		ok = ok && (c >= 'a' && c <= 'z' || c >= '0' && c <= '9')
	}
	if !ok {
		return fmt.Errorf("instance: name %q: want 1 to %d lowercase letters and digits", name, MaxName)
	}
	return nil
}

// derivedName is the name of the instance of data dir dir when none is
// given: the default one's for the default data dir, else 8 letters and
// digits of a hash of its path.
func derivedName(dir string) string {
	if dir == DefaultDataDir {
		return DefaultName
	}
	sum := sha256.Sum256([]byte(dir))
	return strings.ToLower(base32.StdEncoding.EncodeToString(sum[:]))[:8]
}

// record is the instance file of a data dir.
type record struct {
	Name string `json:"name"`
	Slot int    `json:"slot"`
}

// Read returns the names recorded in data dir dir, for a tool that cleans
// up after a daemon; fs.ErrNotExist when it has no record.
func Read(dir string) (Names, error) {
	r, err := readRecord(dir)
	if err != nil {
		return Names{}, err
	}
	return NamesOf(r.Name, r.Slot), nil
}

// readRecord reads and checks the record of data dir dir.
func readRecord(dir string) (record, error) {
	b, err := os.ReadFile(filepath.Join(dir, recordFile))
	if err != nil {
		return record{}, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return record{}, fmt.Errorf("instance: %s: %w", filepath.Join(dir, recordFile), err)
	}
	if err := checkRecord(r); err != nil {
		return record{}, fmt.Errorf("instance: %s: %w", filepath.Join(dir, recordFile), err)
	}
	return r, nil
}

// checkRecord refuses a record whose name and slot do not go together.
func checkRecord(r record) error {
	if err := CheckName(r.Name); err != nil {
		return err
	}
	if (r.Name == DefaultName) != (r.Slot == 0) || r.Slot < 0 || r.Slot > MaxSlot {
		return fmt.Errorf("instance %q in slot %d: want slot 0 for %s alone, else 1 to %d", r.Name, r.Slot, DefaultName, MaxSlot)
	}
	return nil
}

// writeRecord records r in data dir dir, replacing the record whole.
func writeRecord(dir string, r record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, recordFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// nameFor decides the instance name of data dir dir (see Options).
func nameFor(dir string, opts Options) (string, error) {
	r, err := readRecord(dir)
	switch {
	case err == nil:
		if opts.Name != "" && opts.Name != r.Name {
			return "", fmt.Errorf("%w: %s is instance %q, whose sandboxes' networks and cgroups carry its name (start it with --instance %s, or without --instance)", ErrRenamed, dir, r.Name, r.Name)
		}
		return r.Name, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	case opts.Legacy:
		if opts.Name != "" && opts.Name != DefaultName {
			return "", fmt.Errorf("%w: %s predates instances: its sandboxes' networks and cgroups carry the default instance's names (start it with --instance %s, or without --instance)", ErrRenamed, dir, DefaultName)
		}
		return DefaultName, nil
	case opts.Name != "":
		return opts.Name, CheckName(opts.Name)
	}
	return derivedName(dir), nil
}
