package spritesapi

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/sandbox"
)

// stamp is a time as the Sprites clients parse it: RFC 3339 in UTC with
// exactly six fractional digits (Python 3.10's fromisoformat takes no
// more).
type stamp time.Time

func (t stamp) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Time(t).UTC().Format("2006-01-02T15:04:05.000000Z") + `"`), nil
}

// urlSettings is a sprite's URL access: "sprite" (a token of someone who
// may see the sandbox) or "public" (anyone): whether the sandbox's port
// httpPort is public.
type urlSettings struct {
	Auth string `json:"auth"`
}

// httpPort is the port a sprite's URL serves, as on Sprites when no
// service names one.
const httpPort = 8080

// spriteConfig is a sprite's size, read from its hearth size preset.
type spriteConfig struct {
	RAMMB     int64  `json:"ram_mb"`
	CPUs      int64  `json:"cpus"`
	StorageGB int64  `json:"storage_gb"`
	Region    string `json:"region"`
}

// sprite is the Sprites object of one sandbox: the superset of the fields
// the SDKs parse.
type sprite struct {
	ID           string       `json:"id"`
	Name         string       `json:"name"`
	Organization string       `json:"organization"`
	OrgSlug      string       `json:"org_slug"`
	Status       string       `json:"status"`
	URL          string       `json:"url"`
	URLSettings  urlSettings  `json:"url_settings"`
	Labels       []string     `json:"labels"`
	Config       spriteConfig `json:"config"`
	CreatedAt    stamp        `json:"created_at"`
	UpdatedAt    stamp        `json:"updated_at"`
	// LastRunningAt is when the sandbox was last seen running: now while it
	// runs, else its last status change.
	LastRunningAt *stamp `json:"last_running_at,omitempty"`
}

// Sprites statuses: running (processes up), cold (processes stopped, disk
// kept; the next call wakes it). hearth has no "warm" (memory kept while
// paused): a sleeping sandbox has freed its memory, which is cold.
const (
	statusRunning = "running"
	statusCold    = "cold"
)

// statusOf maps a hearth status to Sprites'.
func statusOf(s sandbox.Status) string {
	if s == sandbox.StatusRunning {
		return statusRunning
	}
	return statusCold
}

// spriteName is the name of sb as p writes it: without p's own
// attribution prefix, which hearth adds to the names p chooses (so that a
// client's deterministic names come back exactly as it chose them); an
// operator sees another tenant's sandbox as TENANT/NAME, the one name that
// reaches it (names are unique per tenant).
func spriteName(p sandbox.Principal, sb sandbox.Sandbox) string {
	if p.Role == sandbox.RoleOperator || p.Agent == "" {
		return p.RefOf(sb.Tenant, sb.Name)
	}
	return strings.TrimPrefix(sb.Name, sandbox.AttributionPrefix(p.Agent))
}

// spriteOf renders sb for p, who called r.
func (d *server) spriteOf(r *http.Request, p sandbox.Principal, sb sandbox.Sandbox) sprite {
	labels := sb.Labels
	if labels == nil {
		labels = []string{}
	}
	auth := "sprite"
	if slices.Contains(sb.PublicPorts, httpPort) {
		auth = "public"
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	s := sprite{
		ID:           sb.ID,
		Name:         spriteName(p, sb),
		Organization: sb.Tenant,
		OrgSlug:      sb.Tenant,
		Status:       statusOf(sb.Status),
		URL:          sandbox.ProxyURL(scheme, r.Host, d.domain, sb.Tenant, sb.Name, httpPort),
		URLSettings:  urlSettings{Auth: auth},
		Labels:       labels,
		Config: spriteConfig{
			RAMMB:     sb.Resources.MemoryBytes >> 20,
			CPUs:      max(1, sb.Resources.MilliCPU/1000),
			StorageGB: sb.Resources.DiskBytes >> 30,
		},
		CreatedAt: stamp(sb.CreatedAt),
		UpdatedAt: stamp(sb.UpdatedAt),
	}
	if sb.Status == sandbox.StatusRunning {
		now := stamp(time.Now())
		s.LastRunningAt = &now
	} else {
		at := stamp(sb.UpdatedAt)
		s.LastRunningAt = &at
	}
	return s
}

// createRequest is the body of POST /v1/sprites. Only Name is required.
type createRequest struct {
	Name        string            `json:"name"`
	Config      *requestedConfig  `json:"config"`
	Environment map[string]string `json:"environment"`
	URLSettings *urlSettings      `json:"url_settings"`
	Labels      []string          `json:"labels"`
}

// requestedConfig is the size a create asks for; zero fields ask nothing.
type requestedConfig struct {
	RAMMB     int64 `json:"ram_mb"`
	CPUs      int64 `json:"cpus"`
	StorageGB int64 `json:"storage_gb"`
}

// sizeFor returns the smallest hearth size preset that holds c, or ""
// (the default) when c asks nothing.
func sizeFor(c *requestedConfig) (string, error) {
	if c == nil || c.RAMMB <= 0 && c.CPUs <= 0 && c.StorageGB <= 0 {
		return "", nil
	}
	sizes := sandbox.Sizes()
	names := make([]string, 0, len(sizes))
	for n := range sizes {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return int(sizes[a].MemoryBytes>>20 - sizes[b].MemoryBytes>>20) })
	for _, n := range names {
		r := sizes[n]
		// c.CPUs ≤ MilliCPU/1000 is c.CPUs×1000 ≤ MilliCPU without the
		// product, which overflows for a large c.CPUs.
		if r.MemoryBytes>>20 >= c.RAMMB && r.MilliCPU/1000 >= c.CPUs && r.DiskBytes>>30 >= c.StorageGB {
			return n, nil
		}
	}
	largest := sizes[names[len(names)-1]]
	return "", sandbox.Errorf(sandbox.CodeInvalidArgument, "config asks for %d MB of memory, %d CPUs and %d GB of disk; the largest size holds %d MB, %d CPUs and %d GB",
		c.RAMMB, c.CPUs, c.StorageGB, largest.MemoryBytes>>20, largest.MilliCPU/1000, largest.DiskBytes>>30).
		WithHint("ask for less, or leave config out for the default size")
}

// publicPorts returns the public ports u asks for, starting from those of
// sb: with httpPort for "public", without it for "sprite", unchanged (nil)
// when u says nothing.
func publicPorts(u *urlSettings, sb sandbox.Sandbox) (*[]int, error) {
	if u == nil || u.Auth == "" {
		return nil, nil
	}
	ports := slices.DeleteFunc(slices.Clone(sb.PublicPorts), func(p int) bool { return p == httpPort })
	switch u.Auth {
	case "sprite":
	case "public":
		ports = append(ports, httpPort)
	default:
		return nil, sandbox.Errorf(sandbox.CodeInvalidArgument, "url_settings.auth %q is neither \"sprite\" nor \"public\"", u.Auth).
			WithHint(`set "auth": "sprite" (a token is needed) or "public"`)
	}
	return &ports, nil
}

// handleCreate answers 201 and the new sprite; a name that exists (the
// caller's or not) is 409, which is how Sprites clients learn it.
func (d *server) handleCreate(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
	var req createRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	door.NoteSandbox(r, req.Name)
	if req.Name == "" {
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "missing field \"name\"").WithHint(`send {"name": "my-sprite"}`)
	}
	if len(req.Environment) > 0 {
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "environment is not supported on a sprite").
			WithHint("pass env to each exec instead")
	}
	if _, err := publicPorts(req.URLSettings, sandbox.Sandbox{}); err != nil {
		return err
	}
	size, err := sizeFor(req.Config)
	if err != nil {
		return err
	}
	sb, created, err := d.svc.Sandboxes.Create(r.Context(), p, sandbox.CreateRequest{Name: req.Name, Size: size, Labels: req.Labels})
	if err != nil {
		return err
	}
	door.NoteSandbox(r, sb.Name)
	if !created {
		return sandbox.Errorf(sandbox.CodeAlreadyExists, "sprite %q already exists", req.Name).
			WithHint("use it (get it by name), or delete it first")
	}
	if ports, _ := publicPorts(req.URLSettings, sb); ports != nil && len(*ports) > 0 {
		if sb, err = d.svc.Sandboxes.Update(r.Context(), p, sb.Name, sandbox.SandboxUpdate{PublicPorts: ports}); err != nil {
			return err
		}
	}
	encode(w, http.StatusCreated, d.spriteOf(r, p, sb))
	return nil
}

func (d *server) handleGet(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
	sb, err := d.svc.Sandboxes.Get(r.Context(), p, r.PathValue("name"))
	if err != nil {
		return err
	}
	encode(w, http.StatusOK, d.spriteOf(r, p, sb))
	return nil
}

// updateRequest is the body of PUT /v1/sprites/{name}: a partial update.
type updateRequest struct {
	URLSettings *urlSettings `json:"url_settings"`
	Labels      *[]string    `json:"labels"`
	ClearLabels bool         `json:"clear_labels"`
}

func (d *server) handleUpdate(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
	var req updateRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	var u sandbox.SandboxUpdate
	if req.URLSettings != nil {
		sb, err := d.svc.Sandboxes.Get(r.Context(), p, r.PathValue("name"))
		if err != nil {
			return err
		}
		if u.PublicPorts, err = publicPorts(req.URLSettings, sb); err != nil {
			return err
		}
	}
	switch {
	case req.ClearLabels:
		u.Labels = &[]string{}
	case req.Labels != nil:
		u.Labels = req.Labels
	}
	sb, err := d.svc.Sandboxes.Update(r.Context(), p, r.PathValue("name"), u)
	if err != nil {
		return err
	}
	encode(w, http.StatusOK, d.spriteOf(r, p, sb))
	return nil
}

func (d *server) handleDelete(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
	if err := d.svc.Sandboxes.Destroy(r.Context(), p, r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// Page sizes of a list: Sprites documents at most 50, and its SDKs ask for
// 100 when they page through everything; a larger ask is clamped, never
// refused.
const (
	defaultPage = 50
	maxPage     = 100
)

// orgCounts are the caller's counts and limits, which the JS and Python
// SDKs read at the top level of a list and Go in "org".
type orgCounts struct {
	Name         string `json:"name"`
	Running      int    `json:"running"`
	Warm         int    `json:"warm"`
	Cold         int    `json:"cold"`
	RunningLimit int    `json:"running_limit"`
	WarmLimit    int    `json:"warm_limit"`
}

// spriteList is the body of GET /v1/sprites.
type spriteList struct {
	Sprites               []sprite `json:"sprites"`
	HasMore               bool     `json:"has_more"`
	NextContinuationToken *string  `json:"next_continuation_token"`
	orgCounts
	Org orgCounts `json:"org"`
}

// handleList pages through the caller's sprites in name order. The
// continuation token is the last name of the previous page, so that a page
// never repeats nor skips a sprite that existed all along.
func (d *server) handleList(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
	q := r.URL.Query()
	limit := defaultPage
	if s := q.Get("max_results"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return sandbox.Errorf(sandbox.CodeInvalidArgument, "max_results %q is not a positive number", s).WithHint("ask for 1 to %d", maxPage)
		}
		limit = min(n, maxPage)
	}
	prefix, after := q.Get("prefix"), q.Get("continuation_token")
	all, err := d.svc.Sandboxes.List(r.Context(), p)
	if err != nil {
		return err
	}
	counts := orgCounts{Name: p.Tenant}
	var page []sprite
	for _, sb := range all {
		if sb.Status == sandbox.StatusRunning {
			counts.Running++
		} else {
			counts.Cold++
		}
		if s := d.spriteOf(r, p, sb); strings.HasPrefix(s.Name, prefix) && s.Name > after {
			page = append(page, s)
		}
	}
	slices.SortFunc(page, func(a, b sprite) int { return strings.Compare(a.Name, b.Name) })
	out := spriteList{Sprites: []sprite{}}
	if len(page) > limit {
		out.HasMore = true
		next := page[limit-1].Name
		out.NextContinuationToken = &next
		page = page[:limit]
	}
	out.Sprites = append(out.Sprites, page...)
	if lim, err := d.svc.Tenancy.Limits(r.Context(), p); err == nil && lim.Sandboxes != nil {
		counts.RunningLimit = lim.Sandboxes.Limit
	}
	out.orgCounts, out.Org = counts, counts
	encode(w, http.StatusOK, out)
	return nil
}
