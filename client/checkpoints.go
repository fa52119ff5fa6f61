package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/hearth/hearth/sandbox"
)

// Checkpoint saves the current content of sandbox name, live, with an
// optional label; the checkpoint's parent is the sandbox's head, and it
// becomes the new head. A sleeping sandbox is checkpointed without being
// woken.
func (c *Client) Checkpoint(ctx context.Context, name string, req sandbox.CheckpointRequest) (sandbox.Checkpoint, error) {
	var cp sandbox.Checkpoint
	p, err := sandboxPath(name, "/checkpoints")
	if err != nil {
		return cp, err
	}
	_, err = c.t.doJSON(ctx, http.MethodPost, p, nil, req, &cp)
	return cp, err
}

// ListCheckpoints returns the checkpoints of sandbox name, oldest first;
// their Parent links make a tree, and the sandbox's Head names the one its
// root last descended from.
func (c *Client) ListCheckpoints(ctx context.Context, name string) ([]sandbox.Checkpoint, error) {
	p, err := sandboxPath(name, "/checkpoints")
	if err != nil {
		return nil, err
	}
	var out struct {
		Checkpoints []sandbox.Checkpoint `json:"checkpoints"`
	}
	_, err = c.t.doJSON(ctx, http.MethodGet, p, nil, nil, &out)
	return out.Checkpoints, err
}

// DeleteCheckpoint deletes checkpoint id of sandbox name; its children
// keep their content. not_found when the sandbox has no such checkpoint.
func (c *Client) DeleteCheckpoint(ctx context.Context, name, id string) error {
	switch id {
	case "", ".", "..":
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "invalid checkpoint id %q", id).
			WithHint("`hearth checkpoints %s` lists its checkpoints", name)
	}
	p, err := sandboxPath(name, "/checkpoints/"+url.PathEscape(id))
	if err != nil {
		return err
	}
	_, err = c.t.doJSON(ctx, http.MethodDelete, p, nil, nil, nil)
	return err
}

// Restore makes checkpoint id the content of sandbox name: its processes
// are stopped, its root replaced, and it runs again with the checkpoint as
// its head. The checkpoint stays, so restore can be repeated.
func (c *Client) Restore(ctx context.Context, name, id string) (sandbox.Sandbox, error) {
	var sb sandbox.Sandbox
	p, err := sandboxPath(name, "/restore")
	if err != nil {
		return sb, err
	}
	in := struct {
		Checkpoint string `json:"checkpoint"`
	}{id}
	_, err = c.t.doJSON(ctx, http.MethodPost, p, nil, in, &sb)
	return sb, err
}

// Fork creates the sandbox newName, whose root starts as checkpoint id of
// sandbox name, and returns it; the two are independent from then on.
// already_exists when newName is taken.
func (c *Client) Fork(ctx context.Context, name, id, newName string) (sandbox.Sandbox, error) {
	var sb sandbox.Sandbox
	p, err := sandboxPath(name, "/fork")
	if err != nil {
		return sb, err
	}
	in := struct {
		Checkpoint string `json:"checkpoint"`
		Name       string `json:"name"`
	}{id, newName}
	_, err = c.t.doJSON(ctx, http.MethodPost, p, nil, in, &sb)
	return sb, err
}

// Sleep stops the processes of sandbox name to free their memory; its disk
// stays, and the next call to it (or Wake) starts it again. Sleeping a
// sleeping sandbox is a no-op.
func (c *Client) Sleep(ctx context.Context, name string) (sandbox.Sandbox, error) {
	return c.t.sandboxAction(ctx, name, "/sleep")
}

// Wake starts sandbox name again on its disk when it sleeps or stopped;
// waking a running sandbox is a no-op.
func (c *Client) Wake(ctx context.Context, name string) (sandbox.Sandbox, error) {
	return c.t.sandboxAction(ctx, name, "/wake")
}

// sandboxAction POSTs to a bodiless action route of sandbox name and
// returns the sandbox it answers.
func (t *transport) sandboxAction(ctx context.Context, name, suffix string) (sandbox.Sandbox, error) {
	var sb sandbox.Sandbox
	p, err := sandboxPath(name, suffix)
	if err != nil {
		return sb, err
	}
	_, err = t.doJSON(ctx, http.MethodPost, p, nil, nil, &sb)
	return sb, err
}

// Move moves sleeping sandbox name to the node node, another daemon of
// the store (operators only), and returns it there.
func (c *Client) Move(ctx context.Context, name, node string) (sandbox.Sandbox, error) {
	var sb sandbox.Sandbox
	p, err := sandboxPath(name, "/move")
	if err != nil {
		return sb, err
	}
	in := struct {
		Node string `json:"node"`
	}{node}
	_, err = c.t.doJSON(ctx, http.MethodPost, p, nil, in, &sb)
	return sb, err
}
