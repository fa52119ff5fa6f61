package fetch

import (
	"errors"
	"io"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// image is an image whose manifest and config are in memory and whose
// layer blobs are files of a blob directory (dir/sha256/<hex>), verified
// when they were stored there.
type image struct {
	dir    string
	res    *resolved
	layers map[v1.Hash]v1.Descriptor
}

var _ partial.CompressedImageCore = (*image)(nil)

// newImage is the v1.Image of res with its layers in dir.
func newImage(dir string, res *resolved) (v1.Image, error) {
	i := &image{dir: dir, res: res, layers: map[v1.Hash]v1.Descriptor{}}
	for _, l := range res.manifest.Layers {
		i.layers[l.Digest] = l
	}
	return partial.CompressedToImage(i)
}

func (i *image) RawConfigFile() ([]byte, error)      { return i.res.config, nil }
func (i *image) MediaType() (types.MediaType, error) { return i.res.mt, nil }
func (i *image) RawManifest() ([]byte, error)        { return i.res.raw, nil }

// LayerByDigest gives one of the image's layers; its Compressed stream
// is the file as stored (Open verifies it as it reads).
func (i *image) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	d, ok := i.layers[h]
	if !ok {
		return nil, &Error{Digest: h.String(), Kind: ErrNotFound, Err: errNotLayer}
	}
	return &fileLayer{path: blobPath(i.dir, h), d: d}, nil
}

var errNotLayer = errors.New("not a layer of this image")

// fileLayer is a layer blob in a file.
type fileLayer struct {
	path string
	d    v1.Descriptor
}

func (l *fileLayer) Digest() (v1.Hash, error)            { return l.d.Digest, nil }
func (l *fileLayer) Size() (int64, error)                { return l.d.Size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error) { return l.d.MediaType, nil }
func (l *fileLayer) Compressed() (io.ReadCloser, error)  { return os.Open(l.path) }
