package cluster

import (
	"context"
	"io"
	"net/http"
	"net/url"

	"github.com/hearth/hearth/sandbox"
)

// FetchLayer is lifecycle's Options.FetchLayer: image layer key, as what
// it holds beyond its layer base, from the first live node of the store
// (other than this one, by name) that holds it, through that node's
// node-only route GET /v1/internal/layers/{key}?base=BASE, signed with
// this node's credential. The caller closes the stream. When no node
// sends it, the error is the last node's answer (not_found when none
// holds it).
func (f *Forwarder) FetchLayer(ctx context.Context, key, base string) (io.ReadCloser, error) {
	peers, err := f.m.livePeers(ctx)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.CodeUnavailable, "read the store's nodes: %v", err).WithHint("retry shortly")
	}
	last := sandbox.Errorf(sandbox.CodeNotFound, "no other live node of the store holds image layer %q", key)
	for _, peer := range peers {
		r, err := f.fetchLayerFrom(ctx, peer, key, base)
		if err == nil {
			return r, nil
		}
		last = sandbox.AsError(err)
	}
	return nil, last
}

// fetchLayerFrom is FetchLayer's call to node peer.
func (f *Forwarder) fetchLayerFrom(ctx context.Context, peer, key, base string) (io.ReadCloser, error) {
	u, hc, err := f.NodeClient(ctx, peer)
	if err != nil {
		return nil, err
	}
	u = u.JoinPath("/v1/internal/layers", key)
	u.RawQuery = url.Values{"base": {base}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.CodeInternal, "fetch an image layer from node %s: %v", peer, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.CodeUnavailable, "node %s did not send image layer %q: %v", peer, key, err).With("node", peer)
	}
	if resp.StatusCode == http.StatusOK {
		return resp.Body, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if e, ok := sandbox.ParseErrorBody(b); ok && e.Code.Valid() {
		return nil, e.With("node", peer)
	}
	return nil, sandbox.Errorf(sandbox.CodeUnavailable, "node %s answered %s to a fetch of image layer %q", peer, resp.Status, key).With("node", peer)
}
