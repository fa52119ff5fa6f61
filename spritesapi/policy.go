package spritesapi

import (
	"net/http"
	"slices"

	"github.com/hearth/hearth/sandbox"
)

// networkPolicy is the body of GET and POST /v1/sprites/{name}/policy/network:
// Sprites' egress policy, a DNS allow list of rules.
type networkPolicy struct {
	Rules []networkRule `json:"rules"`
}

// networkRule is one rule: a domain ("example.com", "*.example.com" or
// "*") with its action, allow (the default) or deny; or an include of a
// preset ("defaults").
type networkRule struct {
	Domain  string `json:"domain,omitempty"`
	Action  string `json:"action,omitempty"`
	Include string `json:"include,omitempty"`
}

// denyAll is the egress entry of a policy that allows no name: every
// network denied.
const denyAll = "0.0.0.0/0"

// defaultDomains is the "defaults" preset: where development tools fetch
// code, packages and images, and the AI APIs.
var defaultDomains = []string{
	"github.com", "*.github.com", "*.githubusercontent.com",
	"registry.npmjs.org", "registry.yarnpkg.com",
	"pypi.org", "files.pythonhosted.org",
	"proxy.golang.org", "sum.golang.org", "crates.io", "static.crates.io", "index.crates.io",
	"registry-1.docker.io", "auth.docker.io", "production.cloudflare.docker.com",
	"deb.debian.org", "security.debian.org", "archive.ubuntu.com", "security.ubuntu.com",
	"api.openai.com", "api.anthropic.com", "generativelanguage.googleapis.com",
}

// egressOf maps a Sprites policy onto a sandbox's own egress policy:
// no rule is no policy; a "*" allow rule leaves names unrestricted (deny
// rules still apply); otherwise the allowed domains (with the presets
// included) become the allow list, so that no other name resolves and
// raw addresses are refused unless an allowed name resolved to them, and
// with none every network is denied. Denied domains become the deny list,
// and a deny wins over an allow whatever their specificity (Sprites
// lets the more specific rule win).
func egressOf(p networkPolicy) (sandbox.EgressPolicy, error) {
	var e sandbox.EgressPolicy
	if len(p.Rules) == 0 {
		return e, nil
	}
	allowAll := false
	for _, r := range p.Rules {
		switch {
		case r.Include == "defaults" && r.Domain == "":
			e.Allow = append(e.Allow, defaultDomains...)
			continue
		case r.Include != "":
			return e, sandbox.Errorf(sandbox.CodeInvalidArgument, "unknown include %q", r.Include).WithHint(`the only preset is "defaults"`)
		case r.Domain == "":
			return e, sandbox.Errorf(sandbox.CodeInvalidArgument, "a rule names no domain").WithHint(`give each rule a "domain" or an "include"`)
		}
		switch r.Action {
		case "", "allow":
			if r.Domain == "*" {
				allowAll = true
			} else {
				e.Allow = append(e.Allow, r.Domain)
			}
		case "deny":
			if r.Domain != "*" {
				e.Deny = append(e.Deny, r.Domain)
			}
		default:
			return e, sandbox.Errorf(sandbox.CodeInvalidArgument, "unknown action %q in the rule for %q", r.Action, r.Domain).WithHint(`use "allow" or "deny"`)
		}
	}
	switch {
	case allowAll:
		e.Allow = nil
	case len(e.Allow) == 0:
		e.Deny = append(e.Deny, denyAll)
	}
	for _, list := range [][]string{e.Allow, e.Deny} {
		for i, d := range list {
			if d == denyAll {
				continue
			}
			n, ok := sandbox.DomainPattern(d)
			if !ok {
				return e, sandbox.Errorf(sandbox.CodeInvalidArgument, "%q is not a domain name, *.domain or *", d).WithHint("write e.g. example.com or *.example.com")
			}
			list[i] = n
		}
	}
	return e, nil
}

// policyOf is the Sprites form of a sandbox's own egress policy: its
// domains as rules (an allow-all rule first when it has no allow list),
// and none for no policy. Networks, which Sprites rules cannot name, are
// left out, but for the deny-all entry, shown as a "*" deny.
func policyOf(e sandbox.EgressPolicy) networkPolicy {
	p := networkPolicy{Rules: []networkRule{}}
	if len(e.Allow) == 0 && len(e.Deny) == 0 {
		return p
	}
	if len(e.Allow) == 0 && !slices.Contains(e.Deny, denyAll) {
		p.Rules = append(p.Rules, networkRule{Domain: "*", Action: "allow"})
	}
	for _, d := range e.Allow {
		if _, ok := sandbox.DomainPattern(d); ok {
			p.Rules = append(p.Rules, networkRule{Domain: d, Action: "allow"})
		}
	}
	for _, d := range e.Deny {
		if d == denyAll {
			p.Rules = append(p.Rules, networkRule{Domain: "*", Action: "deny"})
		} else if _, ok := sandbox.DomainPattern(d); ok {
			p.Rules = append(p.Rules, networkRule{Domain: d, Action: "deny"})
		}
	}
	return p
}

func (d *server) handleGetNetworkPolicy(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
	sb, err := d.svc.Sandboxes.Get(r.Context(), p, r.PathValue("name"))
	if err != nil {
		return err
	}
	encode(w, http.StatusOK, policyOf(sb.Egress))
	return nil
}

// handleSetNetworkPolicy replaces the sprite's egress policy (the
// sandbox's own; a running one gets it at once) and answers 204, as the
// SDKs want.
func (d *server) handleSetNetworkPolicy(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
	var req networkPolicy
	if err := decode(w, r, &req); err != nil {
		return err
	}
	e, err := egressOf(req)
	if err != nil {
		return err
	}
	if _, err := d.svc.Sandboxes.Update(r.Context(), p, r.PathValue("name"), sandbox.SandboxUpdate{Egress: &e}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
