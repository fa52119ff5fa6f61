package fetch

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// resolved is an image manifest and its config, as fetched and checked.
type resolved struct {
	raw      []byte
	digest   v1.Hash
	mt       types.MediaType
	manifest *v1.Manifest
	config   []byte
	index    string // the index's digest it was picked from, "" if none
}

// maxIndexDepth bounds indexes nested in indexes.
const maxIndexDepth = 2

// resolve fetches ref's manifest, follows an index to the platform's
// image, and fetches and checks its config.
func (r *remote) resolve(ctx context.Context) (*resolved, error) {
	id := r.ref.Identifier()
	var want *v1.Hash
	if strings.Contains(id, ":") {
		h, err := parseDigest(id)
		if err != nil {
			return nil, r.fail("manifest", id, err)
		}
		want = &h
	}
	res := &resolved{}
	for depth := 0; ; depth++ {
		raw, d, mt, err := r.manifest(ctx, id, want)
		if err != nil {
			return nil, err
		}
		if mt.IsImage() {
			res.raw, res.digest, res.mt = raw, d, mt
			break
		}
		if depth == maxIndexDepth {
			return nil, r.fail("index", d.String(), kindf(ErrUnsupported, "indexes nested more than %d deep", maxIndexDepth))
		}
		if res.index == "" {
			res.index = d.String()
		}
		next, err := pick(raw, r.o)
		if err != nil {
			return nil, r.fail("index", d.String(), err)
		}
		id, want = next.Digest.String(), &next.Digest
	}
	var err error
	if res.manifest, err = checkManifest(res.raw, r.o); err != nil {
		return nil, r.fail("manifest", res.digest.String(), err)
	}
	if res.config, err = r.blob(ctx, res.manifest.Config, r.o.MaxConfigBytes, "config"); err != nil {
		return nil, err
	}
	if err := checkConfig(res.config, res.manifest, r.o); err != nil {
		return nil, r.fail("config", res.manifest.Config.Digest.String(), err)
	}
	return res, nil
}

// manifestType is the media type of a manifest or index: the one it
// states (which its digest covers, unlike a Content-Type header), or for
// one that states none, what its fields show. Schema 1 and anything that
// is neither an image manifest nor an index are refused.
func manifestType(raw []byte) (types.MediaType, error) {
	var probe struct {
		SchemaVersion int             `json:"schemaVersion"`
		MediaType     types.MediaType `json:"mediaType"`
		Manifests     json.RawMessage `json:"manifests"`
		Config        json.RawMessage `json:"config"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return "", kindf(ErrInvalid, "manifest is not JSON: %v", err)
	}
	if probe.SchemaVersion == 1 || probe.MediaType == types.DockerManifestSchema1 || probe.MediaType == types.DockerManifestSchema1Signed {
		return "", kindf(ErrUnsupported, "Docker image manifest schema 1 is not supported: push the image again with a current Docker or tool, which writes schema 2")
	}
	if probe.SchemaVersion != 2 {
		return "", kindf(ErrInvalid, "manifest schemaVersion %d, want 2", probe.SchemaVersion)
	}
	mt := probe.MediaType
	if mt == "" {
		switch {
		case probe.Manifests != nil:
			mt = types.OCIImageIndex
		case probe.Config != nil:
			mt = types.OCIManifestSchema1
		}
	}
	if !mt.IsImage() && !mt.IsIndex() {
		return "", kindf(ErrUnsupported, "manifest media type %q is not a container image's", mt)
	}
	return mt, nil
}

// pick chooses from an index the manifest for Options.Platform: the
// first entry whose platform satisfies it, or an index's only entry when
// that names no platform.
func pick(raw []byte, o *Options) (v1.Descriptor, error) {
	idx, err := v1.ParseIndexManifest(bytes.NewReader(raw))
	if err != nil {
		return v1.Descriptor{}, kindf(ErrInvalid, "index: %v", err)
	}
	var have []string
	var candidates []v1.Descriptor
	for _, m := range idx.Manifests {
		if m.MediaType != "" && !m.MediaType.IsImage() && !m.MediaType.IsIndex() {
			continue
		}
		candidates = append(candidates, m)
	}
	for _, m := range candidates {
		if len(candidates) == 1 && m.Platform == nil {
			return m, checkDigest(m.Digest)
		}
		if m.Platform != nil && m.Platform.Satisfies(o.Platform) {
			return m, checkDigest(m.Digest)
		}
		if m.Platform != nil {
			have = append(have, m.Platform.String())
		}
	}
	return v1.Descriptor{}, kindf(ErrUnsupported, "no image for %s in the index (it has %s)", o.Platform, orNone(have))
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none with a platform"
	}
	return strings.Join(s, ", ")
}

// layerTypes are the layer media types hearth unpacks.
var layerTypes = map[types.MediaType]bool{
	types.OCILayer: true, types.OCILayerZStd: true, types.OCIUncompressedLayer: true,
	types.DockerLayer: true, types.DockerUncompressedLayer: true,
}

// checkManifest parses an image manifest and checks what a pull relies
// on: a container image's config, layers of media types hearth unpacks
// (no foreign URLs), sha256 digests, at most maxLayers layers adding up to
// at most MaxImageBytes.
func checkManifest(raw []byte, o *Options) (*v1.Manifest, error) {
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, kindf(ErrInvalid, "manifest: %v", err)
	}
	if !m.Config.MediaType.IsConfig() || m.Config.MediaType == types.DockerPluginConfig {
		return nil, kindf(ErrUnsupported, "config media type %q: not a container image", m.Config.MediaType)
	}
	if err := checkDescriptor(m.Config); err != nil {
		return nil, err
	}
	if len(m.Layers) > maxLayers {
		return nil, kindf(ErrTooLarge, "%d layers, more than the limit of %d", len(m.Layers), maxLayers)
	}
	var total int64
	for _, l := range m.Layers {
		if !layerTypes[l.MediaType] || len(l.URLs) > 0 {
			return nil, kindf(ErrUnsupported, "layer %s has media type %q (or foreign URLs)", l.Digest, l.MediaType)
		}
		if err := checkDescriptor(l); err != nil {
			return nil, err
		}
		if total += l.Size; total > o.MaxImageBytes {
			return nil, kindf(ErrTooLarge, "the layers add up to more than the limit of %d bytes", o.MaxImageBytes)
		}
	}
	return m, nil
}

// checkConfig checks that a config parses, describes as many layers as
// m has, and is for Options.Platform (when it names a platform).
func checkConfig(raw []byte, m *v1.Manifest, o *Options) error {
	cfg, err := v1.ParseConfigFile(bytes.NewReader(raw))
	if err != nil {
		return kindf(ErrInvalid, "config: %v", err)
	}
	if n := len(cfg.RootFS.DiffIDs); n != len(m.Layers) {
		return kindf(ErrInvalid, "config lists %d layers, manifest %d", n, len(m.Layers))
	}
	got := v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant}
	if got.OS == "" && got.Architecture == "" {
		return nil // an old image that does not say
	}
	if !got.Satisfies(v1.Platform{OS: o.Platform.OS, Architecture: o.Platform.Architecture, Variant: o.Platform.Variant}) {
		return kindf(ErrUnsupported, "the image is for %s, not %s", got, o.Platform)
	}
	return nil
}

// checkDescriptor checks a blob's descriptor: a sha256 digest and a
// size that is not negative.
func checkDescriptor(d v1.Descriptor) error {
	if d.Size < 0 {
		return kindf(ErrInvalid, "blob %s has size %d", d.Digest, d.Size)
	}
	return checkDigest(d.Digest)
}

// checkDigest accepts sha256 digests of 64 lower-case hex digits only:
// blobs are named by them on disk.
func checkDigest(h v1.Hash) error {
	if h.Algorithm != "sha256" || len(h.Hex) != 64 || strings.Trim(h.Hex, "0123456789abcdef") != "" {
		return kindf(ErrUnsupported, "digest %q: only sha256 digests are read", h.String())
	}
	return nil
}

// parseDigest parses and checks a digest string.
func parseDigest(s string) (v1.Hash, error) {
	h, err := v1.NewHash(s)
	if err != nil {
		return v1.Hash{}, kindf(ErrInvalid, "digest %q: %v", s, err)
	}
	return h, checkDigest(h)
}
