package lifecycle

import (
	"context"
	"io"

	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
)

// peerImages moves images between the store's nodes, whose catalog is
// one and whose layers are each node's own: a node fetches the layers of
// an image it lacks from another (fetch), and sends those another asks of
// it (send). It is a part of Images.
type peerImages struct {
	*core
	// storing is Images.storing: a fetch stores layers.
	storing func(ctx context.Context) (done func())
}

// fetch makes sure this node holds the image whose layer key is key
// (a sandbox's root is prepared from it, or a snapshot sent here is based
// on it): the layers of the catalog's version with that top that the node
// lacks are fetched, bottom first, from another node of the store that
// holds them (Options.FetchLayer), each against the layer below it.
// Without FetchLayer, or for a key no version has, it does nothing: what
// needs the image then fails as it would have.
func (s peerImages) fetch(ctx context.Context, key string) error {
	if s.opts.FetchLayer == nil || key == "" {
		return nil
	}
	if ok, err := s.opts.Node.HasImage(ctx, key); err != nil {
		return s.internal("look for the image", err)
	} else if ok {
		return nil
	}
	unlock := s.locks.lock("image layers " + key) // one fetch of an image at a time
	defer unlock()
	version, err := s.versionOf(ctx, key)
	if err != nil || version.Key() == "" {
		return err
	}
	done := s.storing(ctx)
	defer done()
	base := ""
	for _, layer := range version.Layers {
		if err := s.fetchLayer(ctx, version, layer, base); err != nil {
			return err
		}
		base = layer
	}
	s.log.Info("image fetched from another node", "image", version.Name, "tenant", version.Tenant, "digest", version.Digest)
	return nil
}

// fetchLayer fetches layer of image version img, against base, the layer
// below it, unless this node holds it.
func (s peerImages) fetchLayer(ctx context.Context, img sandbox.Image, layer, base string) error {
	if ok, err := s.opts.Node.HasImage(ctx, layer); err != nil {
		return s.internal("look for an image layer", err)
	} else if ok {
		return nil
	}
	r, err := s.opts.FetchLayer(ctx, layer, base)
	if err != nil {
		return sandbox.AsError(err).WithHint("no other node could send image %s (%s); pull it on this node (%s), or retry", img.Name, img.Digest, s.opts.NodeName)
	}
	defer r.Close()
	return s.receive(ctx, node.Transfer{Layer: layer, Image: base}, r, "receive an image layer from another node")
}

// versionOf is the catalog's image version whose top is key; none is the
// zero Image.
func (s peerImages) versionOf(ctx context.Context, key string) (sandbox.Image, error) {
	all, err := s.opts.Store.Images().All(ctx)
	if err != nil {
		return sandbox.Image{}, s.internal("list images", err)
	}
	for _, v := range all {
		if v.Key() == key {
			return v, nil
		}
	}
	return sandbox.Image{}, nil
}

// SendLayer writes image layer key to w as what it holds beyond base,
// for node from, which lacks the image (a node-only route: only a call
// that node made and proved reaches it, door.AuthNode). Only a layer of a
// version in the catalog is sent, against the layer below it there (""
// for the bottom one): anything else, and a layer this node does not
// hold, is not_found.
func (s *Images) SendLayer(ctx context.Context, from, key, base string, w io.Writer) error {
	return s.peers.send(ctx, from, key, base, w)
}

// send is SendLayer.
func (s peerImages) send(ctx context.Context, from, key, base string, w io.Writer) error {
	all, err := s.opts.Store.Images().All(ctx)
	if err != nil {
		return s.internal("list images", err)
	}
	if !layerOf(all, key, base) {
		return sandbox.Errorf(sandbox.CodeNotFound, "no image has layer %q on layer %q", key, base)
	}
	if ok, err := s.opts.Node.HasImage(ctx, key); err != nil {
		return s.internal("look for an image layer", err)
	} else if !ok {
		return sandbox.Errorf(sandbox.CodeNotFound, "node %s does not hold image layer %q", s.opts.NodeName, key).With("node", s.opts.NodeName)
	}
	s.log.Info("sending an image layer", "layer", key, "to", from)
	return s.opts.Node.SendSnapshot(ctx, node.Transfer{Layer: key, Image: base}, w)
}

// layerOf says whether key is a layer of one of versions whose layer
// below it is base ("" for the bottom one).
func layerOf(versions []sandbox.Image, key, base string) bool {
	for _, v := range versions {
		for i, l := range v.Layers {
			if l == key && (i == 0 && base == "" || i > 0 && v.Layers[i-1] == base) {
				return true
			}
		}
	}
	return false
}
