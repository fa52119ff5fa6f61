package sandbox

import "time"

// Status is where a sandbox is in its life.
type Status string

// Statuses. A sandbox is creating until its agent first answers, running
// while its processes live, sleeping when hearth stopped its processes to
// free their memory (idle, or asked to) and will wake it on the next call,
// and stopped when they are gone for another reason but its disk is kept
// (the runtime lost it, or it died); Reason says why it last changed.
const (
	StatusCreating Status = "creating"
	StatusRunning  Status = "running"
	StatusSleeping Status = "sleeping"
	StatusStopped  Status = "stopped"
	// StatusUnavailable is reported, never stored, for a sandbox whose
	// node (Sandbox.Node) stopped heartbeating: its state is unknown
	// until the node is back, and Reason says since when.
	StatusUnavailable Status = "unavailable"
)

// Sandbox is what every door returns for one sandbox.
type Sandbox struct {
	// ID is unique for the life of the data dir and never reused; it names the
	// sandbox's runtime container, root filesystem and state directory.
	ID string `json:"id"`
	// Name is the caller's handle: a DNS label, unique within its tenant
	// (see ParseRef for how callers of other tenants write it).
	Name string `json:"name"`
	// Tenant and Owner (an agent identity) attribute the sandbox to its creator.
	Tenant string `json:"tenant"`
	Owner  string `json:"owner"`
	// Image is the name of the image the sandbox was created from (or
	// its source sandbox was, for a fork), and ImageDigest the version
	// ("sha256:…"; empty for a default image from before versions).
	Image       string `json:"image"`
	ImageDigest string `json:"image_digest,omitempty"`
	// ImageKey is the layer store's key its root was prepared from: the
	// node's, never shown.
	ImageKey string `json:"-"`
	// ImageConfig is what its commands run under, from the image.
	ImageConfig ImageConfig `json:"image_config"`
	Size        string      `json:"size"`
	// Runtime is the OCI runtime (runsc, runc, crun) that isolates the sandbox.
	Runtime string `json:"runtime"`
	Status  Status `json:"status"`
	// Reason says why Status last changed (created, oom, vanished, …).
	Reason    string    `json:"reason,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// ExpiresAt is when the platform destroys the sandbox; zero means never.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Capabilities lists, machine-readably, what this sandbox supports
	// (see the Cap* constants); callers plan with it instead of guessing.
	Capabilities []string `json:"capabilities"`
	// Resources are the limits the sandbox runs under.
	Resources Resources `json:"resources"`
	// Head is the checkpoint the sandbox's root last descended from (the
	// last one taken or restored); a new checkpoint's parent. Empty before
	// the first.
	Head string `json:"head,omitempty"`
	// DiskUsedBytes is what the sandbox's root holds beyond its image,
	// reported by get (not by list, which would have to measure every
	// sandbox); compare it with Resources.DiskBytes.
	DiskUsedBytes int64 `json:"disk_used_bytes,omitempty"`
	// Labels are the caller's free-form tags, in the order set (see
	// ValidateLabels); never nil (an empty list renders as []).
	Labels []string `json:"labels"`
	// PublicPorts are the ports, in order, that the sandbox's URL serves to
	// anyone, without a token (see ValidatePorts); every other port is
	// private to those who may see the sandbox. Never nil.
	PublicPorts []int `json:"public_ports"`
	// Network is the sandbox's network mode: NetworkNone or NetworkEgress.
	Network string `json:"network"`
	// Egress is the sandbox's own egress policy, on top of its tenant's
	// (see EgressPolicy); it applies while Network is egress.
	Egress EgressPolicy `json:"egress"`
	// Node names the node (daemon instance) that runs the sandbox: the
	// one whose runtime holds it, to which the others send its calls.
	// Empty in rows from before nodes, until a node adopts them.
	Node string `json:"node,omitempty"`
}

// SandboxUpdate changes what a sandbox's owner may change after create; a
// nil field keeps the current value.
type SandboxUpdate struct {
	// Labels replaces the sandbox's labels; an empty list clears them.
	Labels *[]string `json:"labels,omitempty"`
	// PublicPorts replaces the sandbox's public ports; an empty list makes
	// every port private again.
	PublicPorts *[]int `json:"public_ports,omitempty"`
	// Egress replaces the sandbox's own egress policy; a running sandbox
	// gets it at once.
	Egress *EgressPolicy `json:"egress,omitempty"`
}

// Capabilities a sandbox can report.
const (
	CapExec        = "exec"         // run commands, streaming stdout/stderr
	CapExecStdin   = "exec.stdin"   // stream stdin to a command and close it
	CapExecTimeout = "exec.timeout" // a deadline kills the whole process group
	CapFiles       = "files"        // read, write, list, stat, mkdir, rm, mv, chmod
	CapIsolation   = "isolation:"   // prefix: isolation:gvisor or isolation:container
	CapRuntime     = "runtime:"     // prefix: runtime:runsc, runtime:runc, …
)

// CreateRequest is the input of create. Zero fields take the daemon's defaults.
type CreateRequest struct {
	Name  string `json:"name,omitempty"`
	Image string `json:"image,omitempty"`
	Size  string `json:"size,omitempty"`
	// TTL is how long the sandbox may live; zero means the daemon default.
	TTL Duration `json:"ttl,omitempty"`
	// Labels are the new sandbox's labels (see ValidateLabels).
	Labels []string `json:"labels,omitempty"`
	// Network is the sandbox's network mode (NetworkNone, NetworkEgress);
	// empty means the tenant's default.
	Network string `json:"network,omitempty"`
	// Egress is the sandbox's own egress policy (see EgressPolicy).
	Egress *EgressPolicy `json:"egress,omitempty"`
}

// Role is what a Principal may do.
type Role string

// Roles. Operators manage everything, tenant admins their tenant, agents only
// the sandboxes they created.
const (
	RoleOperator    Role = "operator"
	RoleTenantAdmin Role = "tenant-admin"
	RoleAgent       Role = "agent"
)

// Principal is the authenticated caller that every door hands to lifecycle.
type Principal struct {
	Tenant string `json:"tenant"`
	Agent  string `json:"agent"`
	Role   Role   `json:"role"`
	// TokenID names the token the caller authenticated with (never its
	// secret), for the audit log; empty for the platform's own calls.
	TokenID string `json:"token_id,omitempty"`
	// NamePrefix, when set, restricts the caller to sandboxes whose names
	// start with it (see InScope): its token was minted restricted.
	NamePrefix string `json:"name_prefix,omitempty"`
}

// Owns reports whether p may see and act on a sandbox of the given tenant and
// owner. Anything it may not see is not_found to it, never permission_denied.
func (p Principal) Owns(tenant, owner string) bool {
	switch p.Role {
	case RoleOperator:
		return true
	case RoleTenantAdmin:
		return p.Tenant == tenant
	default:
		return p.Tenant == tenant && p.Agent == owner
	}
}

// Gone records why a sandbox no longer exists, for a while after it went
// (get of its name says so): who or what destroyed it and when, and the
// reason its status last had (an OOM kill, an idle sleep, a host restart).
type Gone struct {
	Name   string    `json:"name"`
	ID     string    `json:"id"`
	Tenant string    `json:"tenant"`
	Owner  string    `json:"owner"`
	Reason string    `json:"reason"`
	Last   string    `json:"last_status,omitempty"`
	At     time.Time `json:"at"`
}
