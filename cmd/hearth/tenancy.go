package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// The tenancy verbs: tenant, agent, token and limits.

func tenantOps() []subOp {
	return []subOp{
		{"create", "NAME --cpu N --memory SIZE --disk SIZE [--pool POOL] [policy flags]", "create a tenant with its node allocation (operators)", runTenantCreate},
		{"list", "", "list the tenants you can see: NAME CPU MEMORY DISK POOL POLICY", runTenantList},
		{"get", "NAME", "show one tenant", runTenantGet},
		{"update", "NAME [--cpu N --memory SIZE --disk SIZE] [--pool POOL] [policy flags]", "change a tenant's allocation, pool or policy (operators)", runTenantUpdate},
	}
}

func runTenant(ctx context.Context, c *cli, args []string) error {
	return c.runSub(ctx, "tenant", "...", "Manage tenants: their node allocation and the guardrails their sandboxes run under.", tenantOps(), args)
}

// tenantFlags are the allocation, pool and policy flags of tenant create
// and update; set reports which were given.
type tenantFlags struct {
	cpu                                 float64
	memory, disk                        string
	pool                                string
	quota, share, budget, alarm, factor int
	maxTTL, idle, cooldown              time.Duration
	network                             string
	allowEgress                         bool
	resetPolicy                         bool
}

func (tf *tenantFlags) register(fs *flagSet, update bool) {
	fs.Float64Var(&tf.cpu, "cpu", 0, "CPU cores allocated to the tenant (e.g. 16, 1.5)")
	fs.StringVar(&tf.memory, "memory", "", "memory allocated to the tenant (e.g. 64GiB)")
	fs.StringVar(&tf.disk, "disk", "", "disk allocated to the tenant (e.g. 500GiB)")
	pinned := "run the tenant's sandboxes only on the nodes of `POOL` (hearth node --pool), on Kubernetes (default: any node)"
	if update {
		pinned = "run the sandboxes the tenant creates from now on only on the nodes of `POOL` (hearth node --pool), on Kubernetes; '' for any node"
	}
	fs.StringVar(&tf.pool, "pool", "", pinned)
	fs.IntVar(&tf.quota, "agent-quota", 0, "sandboxes one agent identity may hold at once (default 5)")
	fs.IntVar(&tf.share, "agent-share", 0, "cap on an agent's quota, in percent of the tenant's budget in small sandboxes (default 10)")
	fs.IntVar(&tf.budget, "budget", 0, "percent of the allocation all the tenant's sandboxes may take (default 25)")
	fs.DurationVar(&tf.maxTTL, "max-ttl", 0, "longest life a sandbox may ask for, and the default (default: the daemon's, 24h)")
	fs.DurationVar(&tf.idle, "idle-timeout", 0, "idle time before a sandbox sleeps (default: the daemon's, 10m)")
	fs.IntVar(&tf.alarm, "alarm-rate", 0, "creates per minute per identity that raise an alarm (default 10)")
	fs.IntVar(&tf.factor, "breaker-factor", 0, "the breaker opens at this many times the alarm rate (default 3)")
	fs.DurationVar(&tf.cooldown, "breaker-cooldown", 0, "how long an open breaker refuses creates (default 5m)")
	fs.StringVar(&tf.network, "network", "", "network `MODE` of a sandbox whose create names none: none or egress (default none)")
	fs.BoolVar(&tf.allowEgress, "allow-egress", true, "whether the tenant's sandboxes may have egress (--allow-egress=false to forbid)")
	if update {
		fs.BoolVar(&tf.resetPolicy, "reset-policy", false, "drop every policy override back to the defaults first")
	}
}

// apply returns the allocation (nil when no allocation flag was given,
// with all three required when need) and the overrides of the flags given.
func (tf *tenantFlags) apply(fs *flagSet, need bool) (*sandbox.Resources, sandbox.PolicyOverrides, error) {
	set := fs.given()
	var o sandbox.PolicyOverrides
	ints := map[string]struct {
		v   int
		dst **int
	}{"agent-quota": {tf.quota, &o.AgentQuota}, "agent-share": {tf.share, &o.AgentSharePercent}, "budget": {tf.budget, &o.BudgetPercent},
		"alarm-rate": {tf.alarm, &o.AlarmCreatesPerMinute}, "breaker-factor": {tf.factor, &o.BreakerFactor}}
	for name, f := range ints {
		if set[name] {
			*f.dst = &f.v
		}
	}
	durs := map[string]struct {
		v   time.Duration
		dst **sandbox.Duration
	}{"max-ttl": {tf.maxTTL, &o.MaxTTL}, "idle-timeout": {tf.idle, &o.IdleTimeout}, "breaker-cooldown": {tf.cooldown, &o.BreakerCooldown}}
	for name, f := range durs {
		if set[name] {
			d := sandbox.Duration(f.v)
			*f.dst = &d
		}
	}
	if set["network"] {
		o.Network = &tf.network
	}
	if set["allow-egress"] {
		o.AllowEgress = &tf.allowEgress
	}
	if !set["cpu"] && !set["memory"] && !set["disk"] {
		if need {
			return nil, o, &usageError{verb: fs.verb, msg: "missing the allocation: --cpu, --memory and --disk"}
		}
		return nil, o, nil
	}
	if !set["cpu"] || !set["memory"] || !set["disk"] {
		return nil, o, &usageError{verb: fs.verb, msg: "give the whole allocation: --cpu, --memory and --disk together"}
	}
	mem, err := parseBytes(tf.memory)
	if err != nil {
		return nil, o, &usageError{verb: fs.verb, msg: "--memory: " + err.Error()}
	}
	disk, err := parseBytes(tf.disk)
	if err != nil {
		return nil, o, &usageError{verb: fs.verb, msg: "--disk: " + err.Error()}
	}
	return &sandbox.Resources{MilliCPU: int64(math.Round(tf.cpu * 1000)), MemoryBytes: mem, DiskBytes: disk}, o, nil
}

// poolUpdate is the pool an update sets: nil when --pool was not given,
// which keeps the tenant's, and "" (--pool "") to un-pin it.
func (tf *tenantFlags) poolUpdate(fs *flagSet) *string {
	if !fs.given()["pool"] {
		return nil
	}
	return &tf.pool
}

// parseBytes reads a size: a number of bytes, or a number with a unit
// (K, M, G, T with or without "iB"; all binary).
func parseBytes(s string) (int64, error) {
	num := strings.TrimRight(s, "BbiKMGTkmgt")
	unit := strings.ToUpper(strings.TrimSuffix(strings.TrimSuffix(s[len(num):], "B"), "i"))
	shift := map[string]uint{"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[unit]
	v, err := strconv.ParseFloat(num, 64)
	if _, ok := map[string]bool{"": true, "K": true, "M": true, "G": true, "T": true}[unit]; err != nil || !ok || v < 0 {
		return 0, fmt.Errorf("invalid size %q (want e.g. 512MiB, 64GiB, 1T)", s)
	}
	return int64(v * float64(uint64(1)<<shift)), nil
}

func runTenantCreate(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("tenant", "", tenantOps(), "create")
	var tf tenantFlags
	tf.register(fs, false)
	pos, err := fs.parseArgs(args, "tenant create", "NAME")
	if err != nil {
		return err
	}
	alloc, o, err := tf.apply(fs, true)
	if err != nil {
		return err
	}
	t, err := c.client().Admin().CreateTenant(ctx, sandbox.Tenant{Name: pos[0], Allocation: *alloc, Pool: tf.pool, Policy: o})
	if err != nil {
		return err
	}
	return c.printTenant(t)
}

func runTenantUpdate(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("tenant", "", tenantOps(), "update")
	var tf tenantFlags
	tf.register(fs, true)
	pos, err := fs.parseArgs(args, "tenant update", "NAME")
	if err != nil {
		return err
	}
	alloc, o, err := tf.apply(fs, false)
	if err != nil {
		return err
	}
	t, err := c.client().Admin().UpdateTenant(ctx, pos[0], sandbox.TenantUpdate{Allocation: alloc, Pool: tf.poolUpdate(fs), Policy: o, ResetPolicy: tf.resetPolicy})
	if err != nil {
		return err
	}
	return c.printTenant(t)
}

func runTenantGet(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("tenant", "", tenantOps(), "get")
	pos, err := fs.parseArgs(args, "tenant get", "NAME")
	if err != nil {
		return err
	}
	t, err := c.client().Admin().GetTenant(ctx, pos[0])
	if err != nil {
		return err
	}
	return c.printTenant(t)
}

func runTenantList(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("tenant", "", tenantOps(), "list")
	if _, err := fs.parseArgs(args, "tenant list"); err != nil {
		return err
	}
	ts, err := c.client().Admin().ListTenants(ctx)
	if err != nil {
		return err
	}
	return printList(c, "tenants", ts, "NAME\tCPU\tMEMORY\tDISK\tPOOL\tPOLICY", func(x sandbox.Tenant) string {
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", x.Name, formatCPU(x.Allocation.MilliCPU), formatBytes(x.Allocation.MemoryBytes),
			formatBytes(x.Allocation.DiskBytes), dash(x.Pool), dash(formatOverrides(x.Policy)))
	})
}

func (c *cli) printTenant(t sandbox.Tenant) error {
	if c.json {
		return c.printJSON(t)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "name:\t%s\ncpu:\t%s\nmemory:\t%s\ndisk:\t%s\npool:\t%s\npolicy:\t%s\ncreated:\t%s\n", t.Name,
		formatCPU(t.Allocation.MilliCPU), formatBytes(t.Allocation.MemoryBytes), formatBytes(t.Allocation.DiskBytes),
		dash(t.Pool), dash(formatOverrides(t.Policy)), formatTime(t.CreatedAt))
	return tw.Flush()
}

// formatCPU renders millicpu as cores ("1.5 CPUs").
func formatCPU(milli int64) string {
	return strconv.FormatFloat(float64(milli)/1000, 'f', -1, 64) + " CPUs"
}

// formatOverrides renders the set overrides as "key=value" pairs.
func formatOverrides(o sandbox.PolicyOverrides) string {
	var parts []string
	add := func(k string, v any) { parts = append(parts, fmt.Sprintf("%s=%v", k, v)) }
	if o.AgentQuota != nil {
		add("agent-quota", *o.AgentQuota)
	}
	if o.AgentSharePercent != nil {
		add("agent-share", *o.AgentSharePercent)
	}
	if o.BudgetPercent != nil {
		add("budget", *o.BudgetPercent)
	}
	if o.MaxTTL != nil {
		add("max-ttl", time.Duration(*o.MaxTTL))
	}
	if o.IdleTimeout != nil {
		add("idle-timeout", time.Duration(*o.IdleTimeout))
	}
	if o.AlarmCreatesPerMinute != nil {
		add("alarm-rate", *o.AlarmCreatesPerMinute)
	}
	if o.BreakerFactor != nil {
		add("breaker-factor", *o.BreakerFactor)
	}
	if o.BreakerCooldown != nil {
		add("breaker-cooldown", time.Duration(*o.BreakerCooldown))
	}
	if o.DestructivePatterns != nil {
		add("destructive-patterns", len(*o.DestructivePatterns))
	}
	if o.GateOnFailure != nil {
		add("gate-on-failure", *o.GateOnFailure)
	}
	if o.Network != nil {
		add("network", *o.Network)
	}
	if o.AllowEgress != nil {
		add("allow-egress", *o.AllowEgress)
	}
	return strings.Join(parts, " ")
}

func agentOps() []subOp {
	return []subOp{
		{"create", "NAME [--tenant T]", "create an agent identity, its name unique within its tenant (operators; tenant admins in their tenant)", runAgentCreate},
		{"list", "[--tenant T]", "list the agent identities you can see: NAME TENANT CREATED", runAgentList},
	}
}

func runAgent(ctx context.Context, c *cli, args []string) error {
	return c.runSub(ctx, "agent", "...", "Manage agent identities: who, in a tenant, creates and owns sandboxes.", agentOps(), args)
}

func runAgentCreate(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("agent", "", agentOps(), "create")
	tenant := fs.String("tenant", "", "the agent's tenant (default: yours)")
	pos, err := fs.parseArgs(args, "agent create", "NAME")
	if err != nil {
		return err
	}
	a, err := c.client().Admin().CreateAgent(ctx, sandbox.Agent{Name: pos[0], Tenant: *tenant})
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(a)
	}
	fmt.Fprintf(c.stdout, "agent %s created in tenant %s\n", a.Name, a.Tenant)
	return nil
}

func runAgentList(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("agent", "", agentOps(), "list")
	tenant := fs.String("tenant", "", "only this tenant's agents")
	if _, err := fs.parseArgs(args, "agent list"); err != nil {
		return err
	}
	as, err := c.client().Admin().ListAgents(ctx, *tenant)
	if err != nil {
		return err
	}
	return printList(c, "agents", as, "NAME\tTENANT\tCREATED", func(x sandbox.Agent) string {
		return fmt.Sprintf("%s\t%s\t%s", x.Name, x.Tenant, formatTime(x.CreatedAt))
	})
}

func tokenOps() []subOp {
	return []subOp{
		{"create", "--tenant T --agent A [--role R] [--ttl D] [--name-prefix P] | --operator [--agent LABEL] [--ttl D]", "create a token; its secret is printed once, on stdout", runTokenCreate},
		{"list", "", "list the tokens you can see: ID TENANT AGENT ROLE NAMES CREATED EXPIRES REVOKED", runTokenList},
		{"revoke", "ID", "revoke a token, at once and for good", runTokenRevoke},
	}
}

func runToken(ctx context.Context, c *cli, args []string) error {
	return c.runSub(ctx, "token", "...", "Manage bearer tokens. The same token works on the API, the CLI and MCP.", tokenOps(), args)
}

// runTokenCreate creates a token through the API. --operator asks for an
// unrestricted operator token (the daemon lets only an unrestricted
// operator create one): the way to a working operator token on a daemon
// whose store holds one another daemon made.
func runTokenCreate(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("token", "", tokenOps(), "create")
	var req sandbox.TokenRequest
	var role string
	var ttl time.Duration
	fs.StringVar(&req.Tenant, "tenant", "", "the token's tenant (default: yours)")
	fs.StringVar(&req.Agent, "agent", "", "the agent identity the token acts as (with --operator, a label: default operator)")
	fs.StringVar(&role, "role", string(sandbox.RoleAgent), "agent, tenant-admin or operator")
	fs.DurationVar(&ttl, "ttl", 0, "lifetime of the token (default: no expiry)")
	fs.StringVar(&req.NamePrefix, "name-prefix", "", "restrict the token to sandbox names starting with `P`, e.g. hermes- (default: unrestricted)")
	operator := fs.Bool("operator", false, "create an unrestricted operator token, of the system tenant (operators only)")
	_, err := fs.parseArgs(args, "token create")
	if err != nil {
		return err
	}
	req.Role, req.TTL = sandbox.Role(role), sandbox.Duration(ttl)
	if *operator {
		set := fs.given()
		for _, clash := range []string{"tenant", "role", "name-prefix"} {
			if set[clash] {
				return &usageError{verb: "token create", msg: "--operator takes no --" + clash + ": an operator token is the system tenant's, unrestricted"}
			}
		}
		req.Role = sandbox.RoleOperator
	}
	secret, info, err := c.client().Admin().CreateToken(ctx, req)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(map[string]any{"token": secret, "info": info})
	}
	fmt.Fprintln(c.stdout, secret)
	fmt.Fprintf(c.stderr, "token %s: %s %s in tenant %s; the secret above is shown once\n", info.ID, info.Role, info.Agent, info.Tenant)
	return nil
}

func runTokenList(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("token", "", tokenOps(), "list")
	if _, err := fs.parseArgs(args, "token list"); err != nil {
		return err
	}
	ts, err := c.client().Admin().ListTokens(ctx)
	if err != nil {
		return err
	}
	return printList(c, "tokens", ts, "ID\tTENANT\tAGENT\tROLE\tNAMES\tCREATED\tEXPIRES\tREVOKED", func(x sandbox.TokenInfo) string {
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", x.ID, x.Tenant, x.Agent, x.Role, namesOf(x), formatTime(x.CreatedAt),
			formatOptionalTime(x.ExpiresAt), formatOptionalTime(x.RevokedAt))
	})
}

// namesOf is the sandbox names a token reaches: "*" or "<prefix>*".
func namesOf(t sandbox.TokenInfo) string { return t.NamePrefix + "*" }

func formatOptionalTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return formatTime(t)
}

func runTokenRevoke(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("token", "", tokenOps(), "revoke")
	pos, err := fs.parseArgs(args, "token revoke", "ID")
	if err != nil {
		return err
	}
	if err := c.client().Admin().RevokeToken(ctx, pos[0]); err != nil {
		return err
	}
	if c.json {
		return c.printJSON(map[string]any{"revoked": pos[0]})
	}
	fmt.Fprintf(c.stdout, "token %s revoked\n", pos[0])
	return nil
}

// runLimits shows the guardrails the caller is under and its usage.
func runLimits(ctx context.Context, c *cli, args []string) error {
	fs := c.clientFlagSet("limits", "[--tenant T [--agent A]]", "Show the guardrails you are under: your sandbox quota, your tenant's budget, the TTL cap and the create-rate breaker, with what you use of each. With --tenant and --agent, those of a tenant or agent you may see (an operator: any; a tenant admin: its tenant and its agents).")
	tenant := fs.String("tenant", "", "show `TENANT`'s instead of yours")
	agent := fs.String("agent", "", "show `AGENT`'s (of --tenant, or of your tenant)")
	_, err := fs.parseArgs(args, "limits")
	if err != nil {
		return err
	}
	rep, err := c.client().LimitsOf(ctx, *tenant, *agent)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(rep)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "identity:\t%s (%s, tenant %s)\n", rep.Agent, rep.Role, rep.Tenant)
	if rep.Sandboxes == nil {
		fmt.Fprintf(tw, "limits:\tnone (operators are not limited)\nmax ttl:\t%s\n", time.Duration(rep.MaxTTL))
		return tw.Flush()
	}
	fmt.Fprintf(tw, "sandboxes:\t%d of %d\n", rep.Sandboxes.Used, rep.Sandboxes.Limit)
	b := rep.Budget
	fmt.Fprintf(tw, "budget:\t%s of %s, %s of %s memory, %s of %s disk\n",
		formatCPU(b.Used.MilliCPU), formatCPU(b.Limit.MilliCPU), formatBytes(b.Used.MemoryBytes), formatBytes(b.Limit.MemoryBytes),
		formatBytes(b.Used.DiskBytes), formatBytes(b.Limit.DiskBytes))
	fmt.Fprintf(tw, "max ttl:\t%s\nidle timeout:\t%s\n", time.Duration(rep.MaxTTL), time.Duration(rep.IdleTimeout))
	egress := "egress allowed"
	if !rep.AllowEgress {
		egress = "no egress"
	}
	fmt.Fprintf(tw, "network:\t%s by default, %s\n", rep.Network, egress)
	if r := rep.CreateRate; r != nil {
		fmt.Fprintf(tw, "creates:\t%d in the last minute (alarm at %d, breaker at %d)\nbreaker:\t%s", r.Recent, r.AlarmPerMinute, r.BreakerLimit, r.Breaker)
		if !r.Until.IsZero() {
			fmt.Fprintf(tw, " until %s", formatTime(r.Until))
		}
		fmt.Fprintln(tw)
		if !r.ResetsAt.IsZero() {
			fmt.Fprintf(tw, "next reset:\t%s\n", formatTime(r.ResetsAt))
		}
	}
	return tw.Flush()
}
