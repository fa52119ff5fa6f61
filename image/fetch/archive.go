package fetch

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// refNameAnnotation names an image in an OCI layout's index.
const refNameAnnotation = "org.opencontainers.image.ref.name"

// ReadArchive reads an image from a tar stream: an OCI archive (an OCI
// image layout: oci-layout and index.json at the top, as `skopeo copy …
// oci-archive:` and WriteArchive write it) or a docker-archive
// (manifest.json at the top, as `docker save` writes it). An archive of
// several images is refused, save an OCI index of several platforms, which
// resolves to Options.Platform's.
//
// The stream is spooled into dir (a directory private to the caller,
// created if need be) first, at most Options.MaxImageBytes, its manifests
// and config bounded as for Pull; then every blob is verified (an OCI
// archive's against its digest, a docker-archive's layers against the
// config's diff IDs) and kept as dir/sha256/<hex>, which the returned
// image's layers are served from. What else the stream held is removed.
// A docker-archive's image is described by an OCI manifest made for it.
// Errors are *Error, with the kinds Pull's have.
func ReadArchive(ctx context.Context, r io.Reader, dir string, opts Options) (Pulled, error) {
	o := opts.withDefaults()
	s, err := spoolArchive(ctx, r, dir, o.MaxImageBytes)
	if err != nil {
		return Pulled{}, archiveError(err)
	}
	defer os.RemoveAll(s.dir)
	var res *resolved
	var name string
	switch {
	case s.has("oci-layout") && s.has("index.json"):
		res, name, err = s.readOCI(&o, dir)
	case s.has("manifest.json"):
		res, name, err = s.readDocker(&o, dir)
	default:
		err = kindf(ErrInvalid, "neither an OCI archive (oci-layout and index.json) nor a docker-archive (manifest.json)")
	}
	var img v1.Image
	if err == nil {
		img, err = newImage(dir, res)
	}
	if err != nil {
		for _, p := range s.kept {
			os.Remove(p)
		}
		return Pulled{}, archiveError(err)
	}
	return Pulled{Name: name, Digest: res.digest.String(), Index: res.index, Image: img}, nil
}

// archiveError is err as an *Error of an archive.
func archiveError(err error) error {
	if isContext(err) {
		return err
	}
	e := (*Error)(nil)
	if !errors.As(err, &e) {
		e = &Error{Err: err}
	}
	e.archive = true
	return e
}

// readOCI reads an OCI image layout: index.json's image for the platform
// (through nested indexes), its config, and its layers, kept in dest.
func (s *spool) readOCI(o *Options, dest string) (*resolved, string, error) {
	layout, err := s.small("oci-layout", 4096)
	if err != nil {
		return nil, "", err
	}
	var l struct {
		Version string `json:"imageLayoutVersion"`
	}
	if json.Unmarshal(layout, &l) != nil || l.Version == "" {
		return nil, "", &Error{Entry: "oci-layout", Kind: ErrInvalid, Err: errors.New("not an OCI image layout")}
	}
	raw, err := s.small("index.json", o.MaxManifestBytes)
	if err != nil {
		return nil, "", err
	}
	desc, err := pick(raw, o)
	if err != nil {
		return nil, "", err
	}
	name := desc.Annotations[refNameAnnotation]
	res := &resolved{}
	for depth := 0; ; depth++ {
		if raw, err = s.blob(desc, o.MaxManifestBytes, "manifest"); err != nil {
			return nil, "", err
		}
		mt, err := manifestType(raw)
		if err != nil {
			return nil, "", placeAt(err, "manifest", desc.Digest.String())
		}
		if mt.IsImage() {
			res.raw, res.digest, res.mt = raw, desc.Digest, mt
			break
		}
		if depth == maxIndexDepth {
			return nil, "", kindf(ErrUnsupported, "indexes nested more than %d deep", maxIndexDepth)
		}
		if res.index == "" {
			res.index = desc.Digest.String()
		}
		if desc, err = pick(raw, o); err != nil {
			return nil, "", err
		}
	}
	return res, name, s.finish(res, o, dest)
}

// finish checks res's manifest, reads and checks its config, and keeps
// its layers in dest.
func (s *spool) finish(res *resolved, o *Options, dest string) error {
	var err error
	if res.manifest, err = checkManifest(res.raw, o); err != nil {
		return placeAt(err, "manifest", res.digest.String())
	}
	if res.config, err = s.blob(res.manifest.Config, o.MaxConfigBytes, "config"); err != nil {
		return err
	}
	if err := checkConfig(res.config, res.manifest, o); err != nil {
		return placeAt(err, "config", res.manifest.Config.Digest.String())
	}
	for _, l := range res.manifest.Layers {
		if err := s.keep(l, dest); err != nil {
			return err
		}
	}
	return nil
}

// blobEntry is the name of the blob d in an OCI layout.
func blobEntry(d v1.Descriptor) string { return "blobs/sha256/" + d.Digest.Hex }

// blob reads a small blob of an OCI layout (at most max bytes) and
// verifies it.
func (s *spool) blob(d v1.Descriptor, max int64, what string) ([]byte, error) {
	if err := checkDescriptor(d); err != nil {
		return nil, err
	}
	if d.Size > max {
		return nil, kindf(ErrTooLarge, "the %s is %d bytes, more than the limit of %d", what, d.Size, max).at(what, d.Digest.String())
	}
	b, err := s.small(blobEntry(d), max)
	if err != nil {
		return nil, err
	}
	if err := verify(bytes.NewReader(b), what, d); err != nil {
		return nil, err
	}
	return b, nil
}

// keep verifies a layer blob of an OCI layout and moves it to
// dest/sha256/<hex>.
func (s *spool) keep(d v1.Descriptor, dest string) error {
	final := blobPath(dest, d.Digest)
	if haveBlob(final, d.Size) {
		return nil
	}
	f, err := s.lookup(blobEntry(d))
	if err != nil {
		return err
	}
	file, err := os.Open(f.path)
	if err != nil {
		return err
	}
	err = verify(file, "layer", d)
	file.Close()
	if err != nil {
		return err
	}
	return s.moveInto(f.path, final)
}

// moveInto gives a verified spooled file its blob name.
func (s *spool) moveInto(spooled, final string) error {
	if err := os.MkdirAll(filepath.Dir(final), 0o700); err != nil {
		return err
	}
	if err := os.Rename(spooled, final); err != nil {
		return err
	}
	s.kept = append(s.kept, final)
	return nil
}

// dockerManifest is one image of a docker-archive's manifest.json.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// readDocker reads a docker-archive: its one image's config, and its
// layers checked against the config's diff IDs and kept in dest; the
// image is described by an OCI manifest made for it.
func (s *spool) readDocker(o *Options, dest string) (*resolved, string, error) {
	raw, err := s.small("manifest.json", o.MaxManifestBytes)
	if err != nil {
		return nil, "", err
	}
	var images []dockerManifest
	if err := json.Unmarshal(raw, &images); err != nil || len(images) == 0 {
		return nil, "", &Error{Entry: "manifest.json", Kind: ErrInvalid, Err: fmt.Errorf("not a docker-archive manifest (%v)", err)}
	}
	if len(images) > 1 {
		return nil, "", kindf(ErrUnsupported, "the archive holds %d images; import one at a time", len(images))
	}
	img := images[0]
	config, err := s.small(img.Config, o.MaxConfigBytes)
	if err != nil {
		return nil, "", err
	}
	cfgDigest, _, _ := v1.SHA256(bytes.NewReader(config))
	if h := digestInName(img.Config); h != "" && h != cfgDigest.Hex {
		return nil, "", &Error{Entry: img.Config, Kind: ErrDigest, Err: fmt.Errorf("its digest is %s", cfgDigest)}
	}
	cfg, err := v1.ParseConfigFile(bytes.NewReader(config))
	if err != nil || len(cfg.RootFS.DiffIDs) != len(img.Layers) {
		return nil, "", &Error{Entry: img.Config, Kind: ErrInvalid, Err: fmt.Errorf("not a config of %d layers (%v)", len(img.Layers), err)}
	}
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1,
		Config: v1.Descriptor{MediaType: types.OCIConfigJSON, Size: int64(len(config)), Digest: cfgDigest}}
	for i, name := range img.Layers {
		d, err := s.keepDocker(name, cfg.RootFS.DiffIDs[i], dest)
		if err != nil {
			return nil, "", err
		}
		m.Layers = append(m.Layers, d)
	}
	res := &resolved{mt: types.OCIManifestSchema1, config: config}
	if res.raw, err = json.Marshal(m); err != nil {
		return nil, "", err
	}
	res.digest, _, _ = v1.SHA256(bytes.NewReader(res.raw))
	if res.manifest, err = checkManifest(res.raw, o); err != nil {
		return nil, "", err
	}
	if err := checkConfig(config, res.manifest, o); err != nil {
		return nil, "", err
	}
	name := ""
	if len(img.RepoTags) > 0 {
		name = img.RepoTags[0]
	}
	return res, name, nil
}

// keepDocker checks a docker-archive's layer against its diff ID (the
// digest of its uncompressed tar) and moves it to dest/sha256/<hex>,
// returning its descriptor.
func (s *spool) keepDocker(name string, diffID v1.Hash, dest string) (v1.Descriptor, error) {
	if err := checkDigest(diffID); err != nil {
		return v1.Descriptor{}, err
	}
	f, err := s.lookup(name)
	if err != nil {
		return v1.Descriptor{}, err
	}
	file, err := os.Open(f.path)
	if err != nil {
		return v1.Descriptor{}, err
	}
	defer file.Close()
	blob := sha256.New()
	br := bufio.NewReader(io.TeeReader(file, blob))
	dec, closeDec, mt, err := decompress(br)
	if err != nil {
		return v1.Descriptor{}, &Error{Entry: name, Kind: ErrInvalid, Err: err}
	}
	tar := sha256.New()
	_, err = io.Copy(tar, dec)
	closeDec()
	if err == nil {
		_, err = io.Copy(io.Discard, br)
	}
	if err != nil {
		return v1.Descriptor{}, &Error{Entry: name, Kind: ErrInvalid, Err: err}
	}
	if got := hex.EncodeToString(tar.Sum(nil)); got != diffID.Hex {
		return v1.Descriptor{}, &Error{Entry: name, Kind: ErrDigest, Err: fmt.Errorf("its tar's digest is sha256:%s, the config's diff ID %s", got, diffID)}
	}
	d := v1.Descriptor{MediaType: mt, Size: f.size, Digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(blob.Sum(nil))}}
	final := blobPath(dest, d.Digest)
	if haveBlob(final, d.Size) {
		return d, nil
	}
	return d, s.moveInto(f.path, final)
}

// digestInName is the hex digest a docker-archive's file name carries
// ("<hex>.json", "blobs/sha256/<hex>"), or "".
func digestInName(name string) string {
	h := strings.TrimSuffix(path.Base(name), ".json")
	if checkDigest(v1.Hash{Algorithm: "sha256", Hex: h}) != nil {
		return ""
	}
	return h
}
