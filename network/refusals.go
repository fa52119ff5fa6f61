package network

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// Refusal is something a sandbox tried that its network policy refused:
// a lookup of Domain (by the forwarder), or a connection to Dst (by the
// host's firewall, read from the kernel's log by WatchRefusals).
type Refusal struct {
	// Sandbox is the sandbox's id.
	Sandbox string
	// Domain is the name of a refused lookup; empty for a connection.
	Domain string
	// Dst is where a refused connection went: its address, its protocol
	// ("TCP", "UDP", "ICMP", ...) and, for TCP and UDP, its port.
	Dst   netip.Addr
	Proto string
	Port  int
}

// kmsgPath is the kernel's log, as the LOG target writes to it.
const kmsgPath = "/dev/kmsg"

// WatchRefusals reads the kernel's log until ctx ends, from the moment it
// is called, and reports each refused connection of a sandbox of this
// Host's (a line the refuse chain logged, see the package doc) to
// Options.OnRefusal, as a Refusal with the sandbox's id, destination,
// protocol and port. Lines of other Hosts, and of interfaces that are no
// sandbox's, are skipped. The log holds at most 10 refusals a second of
// one sandbox (20 at once), so a sandbox refused faster is reported at
// that rate.
//
// It returns nil once ctx has ended, and an error when it cannot read the
// log (not root, no /dev/kmsg). The daemon runs it in a goroutine of its
// own.
func (h *Host) WatchRefusals(ctx context.Context) error {
	f, err := os.Open(kmsgPath)
	if err != nil {
		return fmt.Errorf("network: watch refusals: %w", err)
	}
	defer f.Close()
	// From now on: what the log holds already was reported by an earlier
	// daemon, or by nobody.
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		return fmt.Errorf("network: watch refusals: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { f.Close() })
	defer stop()
	buf := make([]byte, 8192)
	for {
		n, err := f.Read(buf)
		switch {
		case errors.Is(err, syscall.EPIPE):
			// Records were overwritten before they were read: go on
			// with the next.
			continue
		case err != nil:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("network: watch refusals: %w", err)
		}
		link, r, ok := parseRefusal(string(buf[:n]), h.chains.logPrefix)
		if !ok {
			continue
		}
		sn := h.nets.ofLink(link)
		if sn == nil {
			continue
		}
		r.Sandbox = sn.id
		h.log.Debug("sandbox connection refused by its network policy", "sandbox", sn.id, "dst", r.Dst, "proto", r.Proto, "port", r.Port)
		h.onRefusal(r)
	}
}

// parseRefusal parses one record of /dev/kmsg ("PRIO,SEQ,TIME,FLAGS;MSG"),
// a line the LOG target wrote with prefix: the interface the packet came
// in on (IN=) and where it went.
func parseRefusal(record, prefix string) (link string, r Refusal, ok bool) {
	_, msg, found := strings.Cut(record, ";")
	if !found {
		return "", Refusal{}, false
	}
	msg, found = strings.CutPrefix(msg, prefix)
	if !found {
		return "", Refusal{}, false
	}
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	fields := map[string]string{}
	for _, f := range strings.Fields(msg) {
		if k, v, ok := strings.Cut(f, "="); ok {
			fields[k] = v
		}
	}
	dst, err := netip.ParseAddr(fields["DST"])
	if err != nil || fields["IN"] == "" {
		return "", Refusal{}, false
	}
	r = Refusal{Dst: dst, Proto: fields["PROTO"]}
	if p, err := strconv.Atoi(fields["DPT"]); err == nil {
		r.Port = p
	}
	return fields["IN"], r, true
}

// Sandboxes looks a sandbox up by id (store.Sandboxes does).
type Sandboxes interface {
	ByID(ctx context.Context, id string) (sandbox.Sandbox, error)
}

// LogRefusals returns an Options.OnRefusal that logs each refusal with the
// sandbox's name and tenant, read from sandboxes by id (a refusal comes at
// most 10 times a second per sandbox, and once per refused lookup), and
// counts it with count(tenant, kind), kind "connection" or "lookup"; count
// and log may be nil. A sandbox it cannot read is logged with an empty
// name and tenant.
func LogRefusals(sandboxes Sandboxes, count func(tenant, kind string), log *slog.Logger) func(Refusal) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if count == nil {
		count = func(string, string) {}
	}
	return func(r Refusal) {
		name, tenant := "", ""
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if sb, err := sandboxes.ByID(ctx, r.Sandbox); err == nil {
			name, tenant = sb.Name, sb.Tenant
		}
		if r.Domain != "" {
			count(tenant, "lookup")
			log.Info("egress refused", "kind", "lookup", "sandbox", name, "id", r.Sandbox, "tenant", tenant, "domain", r.Domain)
			return
		}
		count(tenant, "connection")
		log.Info("egress refused", "kind", "connection", "sandbox", name, "id", r.Sandbox, "tenant", tenant, "dst", r.Dst, "proto", r.Proto, "port", r.Port)
	}
}
