package oci

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hearth/hearth/driver"
)

// tarOf is a tar of entries, each a header and, for a regular file, its
// body.
func tarOf(t *testing.T, entries ...tar.Header) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range entries {
		body := []byte("sealed bytes")
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(body)
		}
	}
	tw.Close()
	return &b
}

// TestReceiveMemoryHostile: a memory image another node sends is kept
// only when it is the sealed data key and sealed regular files with plain
// names; anything else (a link, a path, a directory, a name with a
// slash or that climbs, no key) is refused as ErrInvalidImage, and
// nothing is left in the state dir or outside it. A whole image is
// kept; one the node has already is kept as it was.
func TestReceiveMemoryHostile(t *testing.T) {
	state := t.TempDir()
	outside := t.TempDir()
	d := &images{dir: stateDir{path: state}}
	key := func(name string) tar.Header { return tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o600} }
	for what, entries := range map[string][]tar.Header{
		"a symlink":          {key("key"), {Name: "pages.img.sealed", Typeflag: tar.TypeSymlink, Linkname: outside + "/x"}},
		"a hard link":        {key("key"), {Name: "pages.img.sealed", Typeflag: tar.TypeLink, Linkname: "key"}},
		"a path that climbs": {key("key"), key("../../x.sealed")},
		"a path":             {key("key"), key("sub/x.sealed")},
		"an absolute path":   {key("key"), key(outside + "/x.sealed")},
		"a directory":        {key("key"), {Name: "d.sealed", Typeflag: tar.TypeDir, Mode: 0o700}},
		"a hidden name":      {key("key"), key(".x.sealed")},
		"another file":       {key("key"), key("runsc.log")},
		"no key":             {key("pages.img.sealed")},
	} {
		err := d.receive(t.Context(), "ck1", tarOf(t, entries...))
		if !errors.Is(err, driver.ErrInvalidImage) {
			t.Errorf("an image with %s = %v; want ErrInvalidImage", what, err)
		}
		if left, _ := os.ReadDir(d.dir.memory()); len(left) != 0 {
			t.Errorf("an image with %s left %v", what, left)
		}
	}
	if left, _ := os.ReadDir(outside); len(left) != 0 {
		t.Errorf("hostile images wrote %v outside the state dir", left)
	}
	if err := d.receive(t.Context(), "ck1", tarOf(t, key("key"), key("checkpoint.img.sealed"), key("pages_meta.img.sealed"))); err != nil {
		t.Fatalf("a whole image = %v", err)
	}
	if err := d.receive(t.Context(), "ck1", tarOf(t, key("key"))); err != nil {
		t.Fatalf("an image the node has already = %v; want it kept as it was", err)
	}
	got, _ := os.ReadDir(d.dir.memoryDir("ck1"))
	if len(got) != 3 {
		t.Errorf("image ck1 holds %v; want key and two sealed files", got)
	}
	if _, err := os.Stat(filepath.Join(d.dir.memoryDir("ck1"), "pages_meta.img.sealed")); err != nil {
		t.Error(err)
	}
}
