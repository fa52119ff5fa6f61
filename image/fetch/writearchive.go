package fetch

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// WriteArchive writes img to w as an OCI archive: a tar holding an OCI
// image layout (oci-layout, index.json, blobs/sha256/…) whose index lists
// img's manifest, annotated org.opencontainers.image.ref.name=name (no
// annotation when name is ""). The manifest, config and layer blobs are
// written as img has them, so its digest is kept; each layer is checked
// against its digest as it is copied, and a mismatch fails the write
// (what was written of w is then not an archive).
func WriteArchive(ctx context.Context, w io.Writer, name string, img v1.Image) error {
	raw, err := img.RawManifest()
	if err != nil {
		return err
	}
	mt, err := img.MediaType()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	configName, err := img.ConfigName()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	desc := v1.Descriptor{MediaType: mt, Size: int64(len(raw)), Digest: digest}
	if name != "" {
		desc.Annotations = map[string]string{refNameAnnotation: name}
	}
	index, err := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{desc}})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	for _, f := range []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{"blobs/", nil},
		{"blobs/sha256/", nil},
		{"blobs/sha256/" + digest.Hex, raw},
		{"blobs/sha256/" + configName.Hex, config},
	} {
		if err := writeEntry(tw, f.name, int64(len(f.data)), bytes.NewReader(f.data)); err != nil {
			return err
		}
	}
	if err := writeLayers(ctx, tw, layers, configName); err != nil {
		return err
	}
	return tw.Close()
}

// writeLayers copies each distinct layer blob into tw, verified.
func writeLayers(ctx context.Context, tw *tar.Writer, layers []v1.Layer, configName v1.Hash) error {
	seen := map[v1.Hash]bool{configName: true}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		if seen[d] {
			continue
		}
		seen[d] = true
		if err := checkDigest(d); err != nil {
			return err
		}
		size, err := l.Size()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		err = writeEntry(tw, "blobs/sha256/"+d.Hex, size, newVerifier(ctxReader{ctx, rc}, "layer", d, size))
		rc.Close()
		if err != nil {
			return fmt.Errorf("layer %s: %w", d, err)
		}
	}
	return nil
}

// writeEntry writes a file of size bytes from r (a directory when the
// name ends in "/"), owned by root, dated the epoch, so that an image's
// archive is the same bytes each time.
func writeEntry(tw *tar.Writer, name string, size int64, r io.Reader) error {
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
	if name[len(name)-1] == '/' {
		hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeDir, 0o755, 0
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if hdr.Typeflag == tar.TypeDir {
		return nil
	}
	// Read one byte past size, so that a verifier sees the blob's end.
	n, err := io.Copy(tw, io.LimitReader(r, size+1))
	if err != nil {
		return err
	}
	if n != size {
		return fmt.Errorf("%s: %d bytes, want %d", name, n, size)
	}
	return nil
}
