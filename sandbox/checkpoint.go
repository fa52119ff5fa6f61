package sandbox

import "time"

// Checkpoint is a saved state of a sandbox's root filesystem, taken live.
// The checkpoints of one sandbox form a tree: Parent is the checkpoint the
// sandbox's root descended from when this one was taken (its head), empty
// for one taken from the image.
type Checkpoint struct {
	ID string `json:"id"`
	// SandboxID is the sandbox it belongs to; Sandbox is its name.
	SandboxID string    `json:"sandbox_id"`
	Sandbox   string    `json:"sandbox"`
	Label     string    `json:"label,omitempty"`
	Parent    string    `json:"parent,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// SizeBytes is what the sandbox's disk was charged when the checkpoint
	// was taken: the bytes it had written since it was created, forked or
	// last restored (data a restore or fork brought back stays charged to
	// where it was first written). The checkpoint shares that data with
	// the sandbox and with later checkpoints for as long as they keep it.
	SizeBytes int64 `json:"size_bytes"`
	// Memory says the checkpoint includes the processes' memory; without
	// it, restore starts the sandbox's processes afresh on its files.
	Memory bool `json:"memory"`
}

// AutoLabel labels the checkpoints hearth takes on its own, before a
// command that looks destructive.
const AutoLabel = "auto: before a destructive command"

// Auto reports whether hearth took c on its own (see AutoLabel).
func (c Checkpoint) Auto() bool { return c.Label == AutoLabel }

// MaxLabelLen is the longest checkpoint label.
const MaxLabelLen = 200

// ValidateLabel checks a checkpoint label: at most MaxLabelLen bytes of
// printable text.
func ValidateLabel(label string) error {
	if len(label) > MaxLabelLen {
		return Errorf(CodeInvalidArgument, "checkpoint label is %d bytes, longer than %d", len(label), MaxLabelLen).
			WithHint("shorten it to at most %d bytes", MaxLabelLen).With("limit", MaxLabelLen).With("used", len(label))
	}
	for _, r := range label {
		if r < 0x20 || r == 0x7f {
			return Errorf(CodeInvalidArgument, "checkpoint label contains a control character").
				WithHint("use printable text, e.g. \"before migration\"")
		}
	}
	return nil
}

// CheckpointRequest asks for a checkpoint of a sandbox.
type CheckpointRequest struct {
	// Label names the checkpoint for people (see ValidateLabel).
	Label string `json:"label,omitempty"`
	// Memory asks for the processes' memory too, where the runtime can
	// (gVisor): a restore then resumes the processes where they were,
	// instead of starting them afresh on the checkpoint's files.
	Memory bool `json:"memory,omitempty"`
	// Sleep leaves a running sandbox asleep at the checkpoint: with
	// Memory its processes are stopped at the instant their memory is
	// saved, so that restoring the checkpoint resumes them losing
	// nothing (what moving a running sandbox to another node needs).
	Sleep bool `json:"sleep,omitempty"`
}
