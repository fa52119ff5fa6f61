package network

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// commands runs the host's network tools, each by the path New found:
// iproute2's ip and tc, iptables and iptables-restore, and ipset. Every
// error quotes the command and its stderr.
type commands struct {
	ipBin, tcBin, iptBin, restoreBin, ipsetBin string
	log                                        *slog.Logger
}

// lookCommands finds the tools on PATH, or says which is missing
// (ErrUnavailable).
func lookCommands(log *slog.Logger) (*commands, error) {
	c := &commands{log: log}
	for _, b := range []struct {
		bin  *string
		name string
		pkg  string
	}{{&c.ipBin, "ip", "iproute2"}, {&c.tcBin, "tc", "iproute2"}, {&c.iptBin, "iptables", "iptables"}, {&c.restoreBin, "iptables-restore", "iptables"}, {&c.ipsetBin, "ipset", "ipset"}} {
		p, err := exec.LookPath(b.name)
		if err != nil {
			return nil, fmt.Errorf("%w: %s not found (install %s)", ErrUnavailable, b.name, b.pkg)
		}
		*b.bin = p
	}
	return c, nil
}

// run runs bin with args and stdin, and returns its stdout.
func (c *commands) run(ctx context.Context, stdin *strings.Reader, bin string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	err := cmd.Run()
	c.log.Debug("network command", "cmd", bin, "args", args, "took", time.Since(began).Round(time.Microsecond), "err", err)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// lines is the input of a tool's batch mode: one command a line.
func lines(cmds []string) *strings.Reader { return strings.NewReader(strings.Join(cmds, "\n") + "\n") }

// ip runs ip with args.
func (c *commands) ip(ctx context.Context, args ...string) ([]byte, error) {
	return c.run(ctx, nil, c.ipBin, args...)
}

// ipBatch runs ip commands, one a line, in one ip process: in namespace
// ns when it is not empty. It stops at the first that fails.
func (c *commands) ipBatch(ctx context.Context, ns string, cmds ...string) error {
	args := []string{"-batch", "-"}
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	_, err := c.run(ctx, lines(cmds), c.ipBin, args...)
	return err
}

// tc runs tc with args.
func (c *commands) tc(ctx context.Context, args ...string) ([]byte, error) {
	return c.run(ctx, nil, c.tcBin, args...)
}

// tcBatch runs tc commands, one a line, in one tc process. It stops at the
// first that fails.
func (c *commands) tcBatch(ctx context.Context, cmds []string) error {
	_, err := c.run(ctx, lines(cmds), c.tcBin, "-batch", "-")
	return err
}

// ipset runs ipset with args.
func (c *commands) ipset(ctx context.Context, args ...string) ([]byte, error) {
	return c.run(ctx, nil, c.ipsetBin, args...)
}

// ipsetRestore runs ipset restore on cmds (-exist: an add of an entry
// that is there renews it, a del of one that is not is no error).
func (c *commands) ipsetRestore(ctx context.Context, cmds []string) error {
	if len(cmds) == 0 {
		return nil
	}
	_, err := c.run(ctx, lines(cmds), c.ipsetBin, "-exist", "restore")
	return err
}

// iptables runs iptables -w (waiting for the xtables lock that another
// program may hold) with args.
func (c *commands) iptables(ctx context.Context, args ...string) ([]byte, error) {
	return c.run(ctx, nil, c.iptBin, append([]string{"-w"}, args...)...)
}

// iptablesRestore applies in, iptables-restore's input, as one
// transaction per table, without flushing what in does not name.
func (c *commands) iptablesRestore(ctx context.Context, in string) error {
	_, err := c.run(ctx, strings.NewReader(in), c.restoreBin, "-w", "--noflush")
	return err
}

// listChain returns `iptables -t table -S [chain]`, line by line.
func (c *commands) listChain(ctx context.Context, table, chain string) ([]string, error) {
	args := []string{"-t", table, "-S"}
	if chain != "" {
		args = append(args, chain)
	}
	out, err := c.iptables(ctx, args...)
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n"), nil
}

// chainExists reports whether table has chain.
func (c *commands) chainExists(ctx context.Context, table, chain string) (bool, error) {
	listing, err := c.listChain(ctx, table, "")
	if err != nil {
		return false, err
	}
	return slices.Contains(listing, "-N "+chain), nil
}

// ensureChain creates chain in table unless it is there.
func (c *commands) ensureChain(ctx context.Context, table, chain string) error {
	if exists, err := c.chainExists(ctx, table, chain); err != nil || exists {
		return err
	}
	if _, err := c.iptables(ctx, "-t", table, "-N", chain); err != nil {
		// Another process may have made it meanwhile.
		if exists, _ := c.chainExists(ctx, table, chain); exists {
			return nil
		}
		return err
	}
	return nil
}

// chainRules lists chain of the filter table, the limits or the egress
// one (iptables -S). A host where Setup has not run since it booted has no
// such chain, and so no rules.
func (c *commands) chainRules(ctx context.Context, chain string) ([]string, error) {
	listing, err := c.listChain(ctx, "filter", chain)
	if err == nil {
		return listing, nil
	}
	if exists, lerr := c.chainExists(ctx, "filter", chain); lerr == nil && !exists {
		return nil, nil
	}
	return nil, err
}

// setLinkRules makes chain, one of the Host's per-sandbox chains, hold
// want as link's rules and no others of link's, in one iptables-restore
// transaction (see linkRulesRestore); changed says whether it had to.
func (c *commands) setLinkRules(ctx context.Context, chain, link string, want []string) (changed bool, err error) {
	listing, err := c.chainRules(ctx, chain)
	if err != nil {
		return false, err
	}
	in := linkRulesRestore(listing, chain, link, want)
	if in == "" {
		return false, nil
	}
	if err := c.iptablesRestore(ctx, in); err != nil {
		return false, err
	}
	return true, nil
}

// hookFirst places hk at the top of its built-in chain (see
// hookPlacement), as the only jump of its kind there: where other Hosts'
// jumps alone are above it, it stays. A jump found further down (another
// program inserted rules above it) moves to the first rule without a
// moment unhooked, and without deleting by rule number, which a program
// changing the chain meanwhile would make delete the wrong rule: a marked
// copy of the jump goes in first, then every plain one comes out (by its
// spec), the plain one goes in first, and the copy comes out.
func (c *commands) hookFirst(ctx context.Context, hk hook) error {
	listing, err := c.listChain(ctx, hk.table, hk.from)
	if err != nil {
		return err
	}
	count, placed := hookPlacement(listing, hk)
	if count == 1 && placed {
		return nil
	}
	plain := []string{"-t", hk.table, "-I", hk.from, "1", "-j", hk.to}
	if count == 0 {
		_, err := c.iptables(ctx, plain...)
		return err
	}
	marked := []string{"-m", "comment", "--comment", movingComment, "-j", hk.to}
	if _, err := c.iptables(ctx, append([]string{"-t", hk.table, "-I", hk.from, "1"}, marked...)...); err != nil {
		return err
	}
	if err := c.deleteHook(ctx, hk, count); err != nil {
		return err
	}
	if _, err := c.iptables(ctx, plain...); err != nil {
		return err
	}
	_, err = c.iptables(ctx, append([]string{"-t", hk.table, "-D", hk.from}, marked...)...)
	return err
}

// deleteHook deletes n plain jumps hk, each time the first one left.
func (c *commands) deleteHook(ctx context.Context, hk hook, n int) error {
	for range n {
		if _, err := c.iptables(ctx, "-t", hk.table, "-D", hk.from, "-j", hk.to); err != nil {
			return err
		}
	}
	return nil
}
