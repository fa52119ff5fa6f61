package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// runAudit shows the audit log the caller may read. With --json it prints
// JSONL, one event per line, which is the export format: `hearth audit
// --json --since 720h > audit.jsonl`.
func runAudit(ctx context.Context, c *cli, args []string) error {
	fs := c.clientFlagSet("audit", "[--since D|TIME] [--agent A] [--tenant T] [--sandbox NAME] [--limit N] [--json]",
		"Show the audit log, oldest first: every call to the daemon, who made it, through which door (api, cli), on which sandbox, how it ended and how long it took. "+
			"An operator sees every call, a tenant admin its tenant's, an agent its own. "+
			"--json prints one JSON object per line (JSONL), the export format.")
	since := fs.String("since", "", "only events since this duration ago (`D|TIME`: 24h) or this RFC 3339 time")
	agent := fs.String("agent", "", "only the calls of this agent identity")
	tenant := fs.String("tenant", "", "only the calls of this tenant")
	on := fs.String("sandbox", "", "only the calls on this sandbox (`NAME`, or TENANT/NAME), since it was created")
	limit := fs.Int("limit", 0, "only the newest `N` events (default 1000, at most 10000)")
	_, err := fs.parseArgs(args, "audit")
	if err != nil {
		return err
	}
	if *limit < 0 {
		return &usageError{verb: "audit", msg: fmt.Sprintf("--limit %d is negative", *limit)}
	}
	f := sandbox.AuditFilter{Tenant: *tenant, Agent: *agent, Limit: *limit, OnName: *on}
	if *since != "" {
		if f.Since, err = parseSince(*since, time.Now()); err != nil {
			return &usageError{verb: "audit", msg: "--since: " + err.Error()}
		}
	}
	events, err := c.client().Admin().Audit(ctx, f)
	if err != nil {
		return err
	}
	if c.json {
		enc := json.NewEncoder(c.stdout)
		enc.SetEscapeHTML(false)
		for _, e := range events {
			if err := enc.Encode(e); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "AT\tDOOR\tVERB\tWHO\tSANDBOX\tCODE\tMS")
	for _, e := range events {
		who := "-"
		if e.Agent != "" {
			who = e.Tenant + "/" + e.Agent
		}
		code := "ok"
		if e.Code != "" {
			code = string(e.Code)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.At.Format("2006-01-02T15:04:05.000Z07:00"), e.Door, e.Verb,
			who, dash(e.Sandbox), code, strconv.FormatInt(e.DurationMs, 10))
	}
	return tw.Flush()
}

// parseSince reads --since: a duration back from now ("24h", "90m") or an
// RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("%q is neither a duration (24h) nor an RFC 3339 time (2026-01-02T15:04:05Z)", s)
	}
	return now.Add(-d), nil
}
