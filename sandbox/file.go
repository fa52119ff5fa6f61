package sandbox

import (
	"io/fs"
	"time"
)

// FileType is the kind of a directory entry.
type FileType string

// File types.
const (
	FileRegular FileType = "file"
	FileDir     FileType = "dir"
	FileSymlink FileType = "symlink"
	FileOther   FileType = "other"
)

// FileInfo describes one file inside a sandbox. Path is absolute inside the
// sandbox; Mode holds only the permission bits (and setuid/setgid/sticky).
type FileInfo struct {
	Name    string      `json:"name"`
	Path    string      `json:"path"`
	Type    FileType    `json:"type"`
	Size    int64       `json:"size"`
	Mode    fs.FileMode `json:"mode"`
	ModTime time.Time   `json:"mtime"`
	Owner   string      `json:"owner"`
	Group   string      `json:"group"`
	// Target is a symlink's target, as stored.
	Target string `json:"target,omitempty"`
}

// WriteRequest says how to write a file. The content travels separately.
type WriteRequest struct {
	Path string `json:"path"`
	// Mode is used when the file is created; an existing file keeps its mode
	// (and owner) unless SetMode is true. Zero means 0644.
	Mode    fs.FileMode `json:"mode,omitempty"`
	SetMode bool        `json:"set_mode,omitempty"`
	// Parents creates missing parent directories (as the sandbox user).
	Parents bool `json:"parents,omitempty"`
	// MaxBytes is the largest content accepted; a larger one is too_large
	// and nothing is kept. Zero means no limit beyond the daemon's.
	MaxBytes int64 `json:"max_bytes,omitempty"`
}
