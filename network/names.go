package network

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// Domain policy: what the Host keeps per attached sandbox so that its
// forwarder can judge each lookup by the sandbox's policy, and the
// addresses names resolved to, in two ipsets of the kernel (see the
// package doc).

const (
	// learnedTTL is how long an address a name resolved to stays in a
	// set after the last lookup that gave it: far longer than most DNS
	// TTLs, because a connection outlives the TTL of the name it was
	// opened to, and the egress rules judge every packet of it.
	learnedTTL = 24 * time.Hour
	// learnedRefresh is how often the same name and address is written
	// to a set again (its timeout renewed): lookups in between cost no
	// command.
	learnedRefresh = time.Hour
	// maxLearned caps the names and addresses one sandbox has in the
	// sets; more are not recorded (and, with domains in its allow list,
	// not reachable) until older ones expire.
	maxLearned = 4096
	// setMaxElem caps each set, for all sandboxes together.
	setMaxElem = 262144
	// rescanEvery bounds how often a lookup from an address the Host
	// does not know makes it read its state dir again.
	rescanEvery = time.Second
)

// sandboxNets is what a Host knows of its attached sandboxes for their
// egress by name: each one's address, link and policy (recorded in the
// state dir, so that the Host of the next daemon start knows them too),
// and the names and addresses its lookups gave (in the kernel's allow and
// deny sets). The forwarder asks it whether a lookup is permitted
// (permit), tells it what a permitted one resolved to (learn), and asks
// it for the names it answers itself (local). It is safe for concurrent
// use.
type sandboxNets struct {
	subnet        netip.Prefix
	stateDir      string
	linkPrefix    string
	chains        chains
	cmd           *commands
	log           *slog.Logger
	onRefusal     func(Refusal)
	gatewayPort   int
	gatewayDomain string
	// record returns the address recorded for a sandbox (Host.readRecord).
	record func(id string) (netip.Addr, bool)

	mu      sync.Mutex // guards byAddr, its sandboxNets, and scanned
	byAddr  map[netip.Addr]*sandboxNet
	scanned time.Time
}

// sandboxNet is what the Host knows of one attached sandbox.
type sandboxNet struct {
	id, link string
	addr     netip.Addr
	egress   Egress
	// learned are the names and addresses written to a set, with when;
	// pruned is when expired ones were last dropped.
	learned map[learnedKey]time.Time
	pruned  time.Time
}

type learnedKey struct {
	name string
	addr netip.Addr
}

// at returns what the Host knows of the sandbox at addr, or nil.
func (n *sandboxNets) at(addr netip.Addr) *sandboxNet {
	n.mu.Lock()
	defer n.mu.Unlock()
	if sn := n.byAddr[addr.Unmap()]; sn != nil {
		return sn
	}
	if !n.subnet.Contains(addr.Unmap()) || time.Since(n.scanned) < rescanEvery {
		return nil
	}
	n.scanLocked()
	return n.byAddr[addr.Unmap()]
}

// ofLink returns what the Host knows of the sandbox whose host-side
// veth is link, or nil.
func (n *sandboxNets) ofLink(link string) *sandboxNet {
	n.mu.Lock()
	defer n.mu.Unlock()
	find := func() *sandboxNet {
		for _, sn := range n.byAddr {
			if sn.link == link {
				return sn
			}
		}
		return nil
	}
	if sn := find(); sn != nil || time.Since(n.scanned) < rescanEvery {
		return sn
	}
	n.scanLocked()
	return find()
}

// scanLocked adds every sandbox recorded in the state dir that the Host
// does not know yet, with its recorded egress policy. netMu is held.
func (n *sandboxNets) scanLocked() {
	n.scanned = time.Now()
	entries, err := os.ReadDir(n.stateDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		id := e.Name()
		if !e.Type().IsRegular() || checkID(id) != nil {
			continue
		}
		addr, ok := n.record(id)
		if !ok || n.byAddr[addr] != nil {
			continue
		}
		n.byAddr[addr] = n.newNet(id, addr, n.readPolicy(id).Egress)
	}
}

// policyRecord is what the Host records of an attached sandbox's rules,
// in Options.StateDir: its egress policy and its connection cap, which the
// forwarder of a restarted daemon judges by and Repair puts back.
type policyRecord struct {
	Egress Egress `json:"egress"`
	Conns  int64  `json:"conns,omitempty"`
}

// policyPath is the file that records sandbox id's policyRecord.
func (n *sandboxNets) policyPath(id string) string { return filepath.Join(n.stateDir, "policy", id) }

// readPolicy returns sandbox id's recorded policy; none (the zero record)
// when there is none or it is damaged.
func (n *sandboxNets) readPolicy(id string) policyRecord {
	var r policyRecord
	b, err := os.ReadFile(n.policyPath(id))
	if err != nil {
		return r
	}
	if err := json.Unmarshal(b, &r); err != nil || r.Egress.Validate() != nil || r.Conns < 0 {
		n.log.Warn("ignoring a damaged policy record", "sandbox", id, "err", err)
		return policyRecord{}
	}
	return r
}

// newNet is what the Host knows of sandbox id at addr, with
// egress policy e, having learned nothing yet.
func (n *sandboxNets) newNet(id string, addr netip.Addr, e Egress) *sandboxNet {
	return &sandboxNet{id: id, link: linkName(n.linkPrefix, id), addr: addr, egress: e, learned: map[learnedKey]time.Time{}}
}

// writePolicy records r as sandbox id's policy.
func (n *sandboxNets) writePolicy(id string, r policyRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return writeFileAtomic(n.policyPath(id), b)
}

// remember makes e sandbox id's policy for the forwarder, and
// records it in the state dir for the Host of the next daemon start.
func (n *sandboxNets) remember(id string, e Egress) error {
	addr, ok := n.record(id)
	if !ok {
		return fmt.Errorf("no address recorded for %s", id)
	}
	r := n.readPolicy(id)
	r.Egress = e
	if err := n.writePolicy(id, r); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if sn := n.byAddr[addr]; sn != nil && sn.id == id {
		sn.egress = e
	} else {
		n.byAddr[addr] = n.newNet(id, addr, e)
	}
	return nil
}

// forget removes sandbox id's egress rules, the addresses it
// learned and its recorded policy (its connection cap's too: Detach
// removes that rule first).
func (n *sandboxNets) forget(ctx context.Context, id string) error {
	link := linkName(n.linkPrefix, id)
	if _, err := n.cmd.setLinkRules(ctx, n.chains.egress, link, nil); err != nil {
		return err
	}
	if err := n.sortLearned(ctx, link, nil); err != nil {
		return err
	}
	if err := os.Remove(n.policyPath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for addr, sn := range n.byAddr {
		if sn.id == id {
			delete(n.byAddr, addr)
		}
	}
	return nil
}

// writeFileAtomic writes b to path (its directory made if missing) by a
// rename, so that a reader finds the old content or the new.
func writeFileAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// permit reports whether the sandbox at client may resolve name (see
// Egress.permits); a refusal is reported (Options.OnRefusal). A client
// the Host does not know has no policy: it may resolve any name.
func (n *sandboxNets) permit(client netip.Addr, name string) bool {
	sn := n.at(client)
	if sn == nil {
		return true
	}
	n.mu.Lock()
	ok := sn.egress.permits(name)
	n.mu.Unlock()
	if !ok {
		n.log.Debug("sandbox lookup refused by its egress policy", "sandbox", sn.id, "domain", name)
		n.onRefusal(Refusal{Sandbox: sn.id, Domain: name})
	}
	return ok
}

// learn records that name resolved to addrs for the sandbox at client,
// in the allow set (see the package doc), before the forwarder answers
// it: a connection it opens at once meets the address there. Names that
// are not domain names (see sandbox.DomainName) are not recorded; nor are
// any once the sandbox has maxLearned.
func (n *sandboxNets) learn(ctx context.Context, client netip.Addr, name string, addrs []netip.Addr) {
	sn := n.at(client)
	if sn == nil || name == "" {
		return
	}
	now := time.Now()
	var lines []string
	n.mu.Lock()
	if now.Sub(sn.pruned) > learnedRefresh || len(sn.learned) >= maxLearned {
		for k, at := range sn.learned {
			if now.Sub(at) > learnedTTL {
				delete(sn.learned, k)
			}
		}
		sn.pruned = now
	}
	for _, a := range addrs {
		k := learnedKey{name, a.Unmap()}
		if at, ok := sn.learned[k]; ok && now.Sub(at) < learnedRefresh {
			continue
		}
		if _, ok := sn.learned[k]; !ok && len(sn.learned) >= maxLearned {
			n.log.Warn("sandbox has too many resolved addresses recorded; not recording more", "sandbox", sn.id, "limit", maxLearned, "domain", name)
			break
		}
		sn.learned[k] = now
		lines = append(lines, setAddLine(n.chains.allowSet, k.addr, sn.link, name, learnedTTL))
	}
	link := sn.link
	n.mu.Unlock()
	if len(lines) == 0 {
		return
	}
	if err := n.cmd.ipsetRestore(ctx, lines); err != nil {
		n.log.Error("record the addresses a sandbox resolved", "sandbox", sn.id, "link", link, "domain", name, "err", err)
	}
}

// local returns the address the forwarder answers name with itself for
// the sandbox at client: its gateway, for the egress gateway's names
// (Options.GatewayDomain and the names below it), when the Host has a
// gateway.
func (n *sandboxNets) local(client netip.Addr, name string) (netip.Addr, bool) {
	if n.gatewayPort == 0 || name != n.gatewayDomain && !strings.HasSuffix(name, "."+n.gatewayDomain) {
		return netip.Addr{}, false
	}
	k, ok := pairOf(n.subnet, client)
	if !ok {
		return netip.Addr{}, false
	}
	gw, _ := pair(n.subnet, k)
	return gw, true
}

// An entry of the allow or deny set: an address a name resolved to for
// the sandbox whose veth is link, until expires.
type learnedEntry struct {
	set, link, name string
	addr            netip.Addr
	timeout         time.Duration
}

// sortLearned moves the entries of link in the allow and deny sets to
// where policy e puts their names: the deny set for a name e denies, the
// allow set for one it permits, neither for one its allow list leaves
// out. A nil e removes them all. It adds before it removes, in one ipset
// process.
func (n *sandboxNets) sortLearned(ctx context.Context, link string, e *Egress) error {
	entries, err := n.learnedEntries(ctx, link)
	if err != nil || len(entries) == 0 {
		return err
	}
	var adds, dels []string
	for _, en := range entries {
		want := ""
		switch {
		case e == nil:
		case e.denies(en.name):
			want = n.chains.denySet
		case e.permits(en.name):
			want = n.chains.allowSet
		}
		if want == en.set {
			continue
		}
		if want != "" {
			adds = append(adds, setAddLine(want, en.addr, link, en.name, en.timeout))
		}
		dels = append(dels, "del "+en.set+" "+en.addr.String()+","+link)
	}
	n.mu.Lock()
	for _, sn := range n.byAddr {
		if sn.link == link {
			clear(sn.learned)
		}
	}
	n.mu.Unlock()
	return n.cmd.ipsetRestore(ctx, append(adds, dels...))
}

// learnedEntries lists link's entries in the allow and deny sets (none
// when the sets do not exist: a Host that never ran Setup).
func (n *sandboxNets) learnedEntries(ctx context.Context, link string) ([]learnedEntry, error) {
	listing, err := n.cmd.ipset(ctx, "save")
	if err != nil {
		return nil, err
	}
	var out []learnedEntry
	for line := range strings.Lines(string(listing)) {
		if en, ok := parseSetEntry(line); ok && en.link == link && (en.set == n.chains.allowSet || en.set == n.chains.denySet) {
			out = append(out, en)
		}
	}
	return out, nil
}

// parseSetEntry parses an entry as `ipset save` lists it:
//
//	add SET ADDR,LINK timeout SECONDS comment "NAME"
func parseSetEntry(line string) (learnedEntry, bool) {
	f := strings.Fields(line)
	if len(f) != 7 || f[0] != "add" || f[3] != "timeout" || f[5] != "comment" {
		return learnedEntry{}, false
	}
	addr, link, ok := strings.Cut(f[2], ",")
	a, err := netip.ParseAddr(addr)
	secs, serr := strconv.Atoi(f[4])
	name, nok := sandbox.DomainName(strings.Trim(f[6], `"`))
	if !ok || err != nil || serr != nil || !nok {
		return learnedEntry{}, false
	}
	return learnedEntry{set: f[1], link: link, name: name, addr: a, timeout: time.Duration(secs) * time.Second}, true
}

// setAddLine is the ipset restore line that adds addr for link to set,
// for timeout, with name as its comment (a domain name: no quote or space
// in it).
func setAddLine(set string, addr netip.Addr, link, name string, timeout time.Duration) string {
	return fmt.Sprintf("add %s %s,%s timeout %d comment %q", set, addr, link, max(int(timeout.Seconds()), 1), name)
}

// ensureSets creates the allow and deny sets when they are missing.
func (n *sandboxNets) ensureSets(ctx context.Context) error {
	for _, set := range []string{n.chains.allowSet, n.chains.denySet} {
		if _, err := n.cmd.ipset(ctx, "-exist", "create", set, "hash:net,iface", "timeout", "0", "comment", "maxelem", strconv.Itoa(setMaxElem)); err != nil {
			return err
		}
	}
	return nil
}
