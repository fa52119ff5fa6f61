package network

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// netnsDir is where `ip netns add` mounts named network namespaces.
const netnsDir = "/run/netns"

// Attachment is a sandbox's place on the host's network.
type Attachment struct {
	// ID is the sandbox's.
	ID string
	// Namespace is the path of the sandbox's network namespace, for its
	// runtime to join: /run/netns/<name>-<id>.
	Namespace string
	// Link is the host side of the sandbox's veth; the other side is eth0
	// in Namespace.
	Link string
	// Addr is the sandbox's address on eth0 and Gateway the host side's,
	// a /31 together; Gateway is the sandbox's default route.
	Addr, Gateway netip.Addr
}

// Namespace returns the path of sandbox id's network namespace.
func (h *Host) Namespace(id string) string { return filepath.Join(netnsDir, h.nsName(id)) }

// Link returns the name of the host side of sandbox id's veth.
func (h *Host) Link(id string) string { return linkName(h.linkPrefix, id) }

func (h *Host) nsName(id string) string { return h.name + "-" + id }

// Attach gives sandbox id its network namespace, wired to the host, and
// returns it; the runtime then starts the sandbox in that namespace. It
// runs Setup first if this Host has not yet.
//
// Attach is idempotent and repairs what it finds: for an id already
// attached (a daemon restart, a wake) it returns the same attachment,
// with the same address, and puts back whatever is missing, such as the
// addresses and routes that gVisor takes off eth0 when it takes the
// interface over. The sandbox's address is the one recorded for id, or a
// free one recorded now (ErrNoAddress when none is left). The sandbox must
// not be running: Attach may reset its interface.
//
// lim caps the sandbox's traffic and connections, and eg is its own
// egress policy (see Limits, Egress and the package doc). Every Attach
// applies both whole, replacing what an earlier one (or SetEgress)
// applied: a wake may change them, a zero field of lim removes that cap,
// and the zero Egress removes the sandbox's egress rules. A negative cap
// or a prefix of eg that is not IPv4 fails before anything is made.
func (h *Host) Attach(ctx context.Context, id string, lim Limits, eg Egress) (Attachment, error) {
	if err := checkID(id); err != nil {
		return Attachment{}, err
	}
	if err := lim.check(); err != nil {
		return Attachment{}, err
	}
	if err := eg.Validate(); err != nil {
		return Attachment{}, err
	}
	if err := h.ensureSetup(ctx); err != nil {
		return Attachment{}, err
	}
	addr, err := h.reserve(id)
	if err != nil {
		return Attachment{}, fmt.Errorf("network: attach %s: %w", id, err)
	}
	k, _ := pairOf(h.subnet, addr)
	gw, _ := pair(h.subnet, k)
	a := Attachment{ID: id, Namespace: h.Namespace(id), Link: h.Link(id), Addr: addr, Gateway: gw}
	if err := h.plumb(ctx, a); err != nil {
		return Attachment{}, fmt.Errorf("network: attach %s: %w", id, err)
	}
	if err := h.limits.limit(ctx, id, lim); err != nil {
		return Attachment{}, fmt.Errorf("network: attach %s: limits: %w", id, err)
	}
	if err := h.egress(ctx, id, eg); err != nil {
		return Attachment{}, fmt.Errorf("network: attach %s: egress: %w", id, err)
	}
	h.log.Debug("sandbox attached", "sandbox", id, "addr", addr, "link", a.Link, "bits_per_sec", lim.BitsPerSec, "conns", lim.Conns, "allow", eg.Allow, "deny", eg.Deny)
	return a, nil
}

// plumb makes a's namespace, veth, addresses and routes, keeping what is
// already right.
func (h *Host) plumb(ctx context.Context, a Attachment) error {
	ns := h.nsName(a.ID)
	if !isNamespace(a.Namespace) {
		if _, err := os.Lstat(a.Namespace); err == nil {
			// A file that is not a namespace: what an interrupted
			// `ip netns add` leaves.
			h.cmd.ip(ctx, "netns", "del", ns)
		}
		if _, err := h.cmd.ip(ctx, "netns", "add", ns); err != nil {
			return err
		}
	}
	// IPv6 goes before any interface comes up, so that none ever gets an
	// address.
	hasEth0, err := prepareNamespace(a.Namespace)
	if err != nil {
		return err
	}
	hostHas, err := linkExists(a.Link)
	if err != nil {
		return err
	}
	if !hostHas || !hasEth0 {
		// Half a pair (an interrupted attach): start it over.
		if hostHas {
			if _, err := h.cmd.ip(ctx, "link", "del", a.Link); err != nil {
				return err
			}
		}
		if hasEth0 {
			if _, err := h.cmd.ip(ctx, "-n", ns, "link", "del", "eth0"); err != nil {
				return err
			}
		}
		if _, err := h.cmd.ip(ctx, "link", "add", a.Link, "type", "veth", "peer", "name", "eth0", "netns", ns); err != nil {
			return err
		}
	}
	// The host side: no IPv6, and strict reverse-path filtering, so that
	// a packet from the sandbox with any source but its own address is
	// dropped.
	if err := disableIPv6(a.Link); err != nil {
		return err
	}
	if err := writeSysctl("/proc/sys/net/ipv4/conf/"+a.Link+"/rp_filter", "1"); err != nil {
		return err
	}
	if err := h.cmd.ipBatch(ctx, "",
		"address flush dev "+a.Link,
		"address add "+a.Gateway.String()+"/31 dev "+a.Link,
		"link set "+a.Link+" up",
	); err != nil {
		return err
	}
	return h.cmd.ipBatch(ctx, ns,
		"link set lo up",
		"address flush dev eth0",
		"address add "+a.Addr.String()+"/31 dev eth0",
		"link set eth0 up",
		"route replace default via "+a.Gateway.String()+" dev eth0",
	)
}

// SandboxAt returns the id of the sandbox whose address is addr, if one
// is attached to this Host. A lookup of an address the Host has not seen
// since it started reads its state dir (at most once a second).
func (h *Host) SandboxAt(addr netip.Addr) (string, bool) {
	if sn := h.nets.at(addr); sn != nil {
		return sn.id, true
	}
	return "", false
}

// Detach removes sandbox id's egress rules, connection cap, veth (and the
// shaper on it), ifb, namespace and address record. It is idempotent: what is missing is
// not an error, and an id with nothing left costs no command. The sandbox
// should be stopped: a runtime still in the namespace keeps it alive
// (without its veth) until it exits.
func (h *Host) Detach(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if !h.Attached(id) {
		return nil
	}
	// The rules first: they are found by the veth's name, while the
	// address record, removed last, keeps the id Attached for a Detach
	// that repeats one cut short.
	if err := h.nets.forget(ctx, id); err != nil {
		return fmt.Errorf("network: detach %s: %w", id, err)
	}
	if err := h.limits.capConns(ctx, id, 0); err != nil {
		return fmt.Errorf("network: detach %s: %w", id, err)
	}
	for _, dev := range []string{h.Link(id), h.IFB(id)} {
		if ok, err := linkExists(dev); !ok && err == nil {
			continue
		}
		if _, err := h.cmd.ip(ctx, "link", "del", dev); err != nil {
			if still, _ := linkExists(dev); still {
				return fmt.Errorf("network: detach %s: %w", id, err)
			}
		}
	}
	if _, err := os.Lstat(h.Namespace(id)); err == nil {
		if _, err := h.cmd.ip(ctx, "netns", "del", h.nsName(id)); err != nil {
			return fmt.Errorf("network: detach %s: %w", id, err)
		}
	}
	if err := os.Remove(h.recordPath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("network: detach %s: %w", id, err)
	}
	h.log.Debug("sandbox detached", "sandbox", id)
	return nil
}

// Attached reports whether anything of sandbox id's attachment exists: its
// address record, its namespace, its veth or its ifb.
func (h *Host) Attached(id string) bool {
	if checkID(id) != nil {
		return false
	}
	for _, p := range []string{h.recordPath(id), h.Namespace(id)} {
		if _, err := os.Lstat(p); err == nil {
			return true
		}
	}
	for _, dev := range []string{h.Link(id), h.IFB(id)} {
		if ok, _ := linkExists(dev); ok {
			return true
		}
	}
	return false
}

// List returns the ids of every sandbox this Host has an address record or
// a namespace of, sorted.
func (h *Host) List() ([]string, error) {
	var ids []string
	entries, err := os.ReadDir(h.stateDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("network: list: %w", err)
	}
	for _, e := range entries {
		if e.Type().IsRegular() && checkID(e.Name()) == nil {
			ids = append(ids, e.Name())
		}
	}
	entries, err = os.ReadDir(netnsDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("network: list: %w", err)
	}
	for _, e := range entries {
		if id, ok := strings.CutPrefix(e.Name(), h.name+"-"); ok && checkID(id) == nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// recordPath is the file that records sandbox id's address.
func (h *Host) recordPath(id string) string { return filepath.Join(h.stateDir, id) }

// readRecord returns the address recorded for id, or false when there is
// none or it is not a sandbox address of the subnet (the subnet changed).
func (h *Host) readRecord(id string) (netip.Addr, bool) {
	b, err := os.ReadFile(h.recordPath(id))
	if err != nil {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(strings.TrimSpace(string(b)))
	if err != nil {
		h.log.Warn("ignoring a damaged address record", "sandbox", id, "err", err)
		return netip.Addr{}, false
	}
	if _, ok := pairOf(h.subnet, a); !ok {
		h.log.Warn("ignoring an address record outside the subnet", "sandbox", id, "addr", a, "subnet", h.subnet)
		return netip.Addr{}, false
	}
	return a, true
}

// reserve returns the address recorded for id, or allocates one that no
// other record holds and records it.
func (h *Host) reserve(id string) (netip.Addr, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a, ok := h.readRecord(id); ok {
		return a, nil
	}
	entries, err := os.ReadDir(h.stateDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return netip.Addr{}, err
	}
	used := map[int]bool{}
	for _, e := range entries {
		if other := e.Name(); other != id && e.Type().IsRegular() && checkID(other) == nil {
			if a, ok := h.readRecord(other); ok {
				k, _ := pairOf(h.subnet, a)
				used[k] = true
			}
		}
	}
	k, err := allocate(h.subnet, id, used)
	if err != nil {
		return netip.Addr{}, err
	}
	_, a := pair(h.subnet, k)
	if err := os.MkdirAll(h.stateDir, 0o700); err != nil {
		return netip.Addr{}, err
	}
	tmp := h.recordPath(id) + ".tmp"
	if err := os.WriteFile(tmp, []byte(a.String()+"\n"), 0o600); err != nil {
		return netip.Addr{}, err
	}
	if err := os.Rename(tmp, h.recordPath(id)); err != nil {
		return netip.Addr{}, err
	}
	return a, nil
}
