package mcpserver

import (
	"context"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
)

// The image tools: what an agent needs to create a sandbox from an image
// of its own (sandbox_create's image), without the catalog's management,
// which stays with the API and the CLI.

type imageListIn struct{}

type imageListOut struct {
	Images []imageItem `json:"images"`
}

// imageItem is an image a sandbox can be created from: its current
// version.
type imageItem struct {
	Name   string `json:"name"`
	Source string `json:"source"`
	Public bool   `json:"public,omitempty"`
}

type imagePullIn struct {
	Ref string `json:"ref" jsonschema:"e.g. host:5000/app:1.0"`
}

// imagePullOut is the image pulled: its name is sandbox_create's image.
type imagePullOut struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
}

// imageList lists the images the caller may create sandboxes from: the
// current version of each of its tenant's and of the public ones.
func (t tools) imageList(ctx context.Context, _ *mcp.CallToolRequest, _ imageListIn) (*mcp.CallToolResult, imageListOut, error) {
	list, err := t.s.svc.Images.List(ctx, t.p)
	if err != nil {
		return nil, imageListOut{}, t.s.publicError(ctx, "image_list", err)
	}
	out := imageListOut{Images: []imageItem{}}
	for _, img := range list {
		if img.Current {
			out.Images = append(out.Images, imageItem{Name: img.Name, Source: img.Source, Public: img.Public})
		}
	}
	return nil, out, nil
}

// imagePull pulls in.Ref into the caller's tenant's images. While it
// runs, each of its progress events is sent as a progress notification
// (message: the event in words) when the request carries a progress
// token: a long pull then keeps a client's request timeout at bay.
func (t tools) imagePull(ctx context.Context, req *mcp.CallToolRequest, in imagePullIn) (*mcp.CallToolResult, imagePullOut, error) {
	var progress lifecycle.Progress
	if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
		progress = (&pullProgress{ctx: ctx, session: req.Session, token: tok}).send
	}
	img, err := t.s.svc.Images.Pull(ctx, t.p, in.Ref, lifecycle.PullOptions{Progress: progress})
	if err != nil {
		return nil, imagePullOut{}, t.s.publicError(ctx, "image_pull", err)
	}
	return nil, imagePullOut{Name: img.Name, Digest: img.Digest}, nil
}

// pullProgress sends a pull's events as progress notifications of the
// request's token, best effort.
type pullProgress struct {
	ctx     context.Context
	session *mcp.ServerSession
	token   any

	mu sync.Mutex
	n  int
}

func (p *pullProgress) send(ev sandbox.ImageProgress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++ // the spec wants progress to increase with each notification
	p.session.NotifyProgress(p.ctx, &mcp.ProgressNotificationParams{
		ProgressToken: p.token,
		Message:       progressText(ev),
		Progress:      float64(p.n),
	})
}

// progressText is ev in a few words.
func progressText(ev sandbox.ImageProgress) string {
	switch ev.Phase {
	case "layer":
		if ev.Cached {
			return fmt.Sprintf("layer %s: cached", ev.Layer)
		}
		return fmt.Sprintf("layer %s: %d of %d bytes", ev.Layer, ev.Bytes, ev.Total)
	case "unpack":
		return fmt.Sprintf("unpacked layer %s: %d bytes", ev.Layer, ev.Bytes)
	}
	return ev.Phase + " " + ev.Text
}
