package sandbox

import "time"

// ValidateNodeName checks the name of a node, one daemon (`hearth serve
// --node`) of the deployment whose daemons share a store: a DNS label, as
// ValidateName's rules say (1–63 characters of lowercase letters, digits
// and '-', starting and ending with a letter or digit), so that it can
// name the node in hosts, logs and metrics as it is. The error is
// invalid_argument, names the node name and says which rule failed.
func ValidateNodeName(name string) error { return validateLabel("node name", name, "node-1") }

// ValidatePool checks the name of a node pool: a tenant's Pool, and the
// pool a node joins (`hearth node --pool`). It is a DNS label, as
// ValidateName's rules say, so that it is a valid Kubernetes label value
// (hearth.dev/pool) as it is. The error is invalid_argument, names the
// pool and says which rule failed.
func ValidatePool(name string) error { return validateLabel("pool", name, "gpu-a100") }

// ClusterHealth is what GET /v1/health tells an operator about the
// daemons (nodes) that share the store.
type ClusterHealth struct {
	// Store names the store: "sqlite FILE" or "postgres HOST:PORT/DB".
	Store string `json:"store"`
	// Schema is the store's schema version, and SchemaKnown the latest
	// the answering node's binary knows: a node older than its store's
	// schema must be upgraded.
	Schema      int `json:"schema"`
	SchemaKnown int `json:"schema_known"`
	// Node is the node that answered.
	Node string `json:"node"`
	// Leader is the node that runs the store-wide loops (it holds their
	// lease), "" while none does.
	Leader string `json:"leader"`
	// Nodes are every node the store knows, by name.
	Nodes []NodeHealth `json:"nodes"`
}

// NodeHealth is one node in ClusterHealth.
type NodeHealth struct {
	Name    string `json:"name"`
	Address string `json:"address,omitempty"`
	Version string `json:"version,omitempty"`
	// HeartbeatAt is the store's time of the node's last heartbeat.
	HeartbeatAt time.Time `json:"heartbeat_at"`
	// Live is false once the node has not heartbeated for a while: its
	// sandboxes are unavailable.
	Live bool `json:"live"`
	// ClockSkewMS is how far the node's clock was ahead of the store's
	// (negative: behind) at that heartbeat, in milliseconds.
	ClockSkewMS int64 `json:"clock_skew_ms"`
}
