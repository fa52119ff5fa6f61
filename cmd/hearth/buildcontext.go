package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// tarDir writes the tree under dir to w as a tar archive, the build
// context of `hearth image build`: directories, regular files and
// symbolic links (as links, never followed), named relative to dir with
// '/', owned by 0:0 (this host's users mean nothing in an image). Other
// files (sockets, devices, FIFOs) are left out: COPY has no use for them.
func tarDir(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		case !info.IsDir() && !info.Mode().IsRegular():
			return nil
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		return copyFile(tw, path, hdr.Size)
	})
	if err != nil {
		return fmt.Errorf("build context %s: %w", dir, err)
	}
	return tw.Close()
}

// copyFile writes the size bytes of the file at path to w.
func copyFile(w io.Writer, path string, size int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.CopyN(w, f, size)
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%s shrank while it was read", path)
	}
	return err
}
