package cluster

import (
	"context"
	"io"
	"net/http"

	"github.com/hearth/hearth/sandbox"
)

// MoveSnapshot sends r, a snapshot stream of sandbox sb that this node is
// moving (lifecycle's Options.Move), to node target's node-only route PUT
// /v1/internal/sandboxes/{id}/root, or …/checkpoints/{ck} for its
// checkpoint ck, or …/checkpoints/{ck}/memory for that checkpoint's
// memory image, signed with this node's credential, and returns once
// target has kept it all, or with target's error.
func (f *Forwarder) MoveSnapshot(ctx context.Context, target string, sb sandbox.Sandbox, ck string, memory bool, r io.Reader) error {
	base, hc, err := f.NodeClient(ctx, target)
	if err != nil {
		return err
	}
	u := base.JoinPath("/v1/internal/sandboxes", sb.ID, "root")
	if ck != "" {
		u = base.JoinPath("/v1/internal/sandboxes", sb.ID, "checkpoints", ck)
	}
	if ck != "" && memory {
		u = u.JoinPath("memory")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u.String(), r)
	if err != nil {
		return sandbox.Errorf(sandbox.CodeInternal, "move to node %s: %v", target, err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := hc.Do(req)
	if err != nil {
		return sandbox.Errorf(sandbox.CodeUnavailable, "node %s did not take the sandbox's snapshot: %v", target, err).
			WithHint("retry shortly, or move it to another node").With("node", target)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if e, ok := sandbox.ParseErrorBody(b); ok && e.Code.Valid() {
		return e.With("node", target)
	}
	return sandbox.Errorf(sandbox.CodeUnavailable, "node %s answered %s to the sandbox's snapshot", target, resp.Status).With("node", target)
}
