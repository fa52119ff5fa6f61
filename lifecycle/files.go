package lifecycle

import (
	"context"
	"io"
	"io/fs"

	"github.com/hearth/hearth/sandbox"
)

// Files reads and writes the files in sandboxes, through each sandbox's
// agent, as the sandbox user; a sleeping sandbox is woken first. It is
// safe for concurrent use.
type Files struct {
	*core
	run *runner
}

// MaxWriteBytes is the largest file write accepted, so doors can refuse a
// larger body before reading it.
func (s *Files) MaxWriteBytes() int64 { return s.opts.MaxWriteBytes }

// ReadFile streams the file at path in p's sandbox to w. Errors (not_found,
// invalid_argument for a directory, …) come before any byte is written.
func (s *Files) ReadFile(ctx context.Context, p sandbox.Principal, name, path string, w io.Writer) error {
	sb, ag, err := s.run.running(ctx, p, name)
	if err != nil {
		return err
	}
	return s.agentErr("read file", sb, ag.ReadFile(ctx, path, w))
}

// WriteFile writes r to req.Path in p's sandbox, as the sandbox user. Content
// over the daemon's limit is too_large and nothing is kept; an existing
// file keeps its mode, and its owner where the user may set it.
func (s *Files) WriteFile(ctx context.Context, p sandbox.Principal, name string, req sandbox.WriteRequest, r io.Reader) (sandbox.FileInfo, error) {
	if req.MaxBytes <= 0 || req.MaxBytes > s.opts.MaxWriteBytes {
		req.MaxBytes = s.opts.MaxWriteBytes
	}
	sb, ag, err := s.run.running(ctx, p, name)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	info, err := ag.WriteFile(ctx, req, r)
	return info, s.agentErr("write file", sb, err)
}

// ListDir lists the directory at path in p's sandbox.
func (s *Files) ListDir(ctx context.Context, p sandbox.Principal, name, path string) ([]sandbox.FileInfo, error) {
	sb, ag, err := s.run.running(ctx, p, name)
	if err != nil {
		return nil, err
	}
	list, err := ag.List(ctx, path)
	return list, s.agentErr("list", sb, err)
}

// Stat describes the file at path in p's sandbox (not following a symlink).
func (s *Files) Stat(ctx context.Context, p sandbox.Principal, name, path string) (sandbox.FileInfo, error) {
	sb, ag, err := s.run.running(ctx, p, name)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	info, err := ag.Stat(ctx, path)
	return info, s.agentErr("stat", sb, err)
}

// Mkdir creates the directory at path and its missing parents (mkdir -p).
func (s *Files) Mkdir(ctx context.Context, p sandbox.Principal, name, path string) (sandbox.FileInfo, error) {
	sb, ag, err := s.run.running(ctx, p, name)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	info, err := ag.Mkdir(ctx, path)
	return info, s.agentErr("mkdir", sb, err)
}

// Remove deletes the file at path; a directory needs recursive unless empty.
func (s *Files) Remove(ctx context.Context, p sandbox.Principal, name, path string, recursive bool) error {
	sb, ag, err := s.run.running(ctx, p, name)
	if err != nil {
		return err
	}
	return s.agentErr("remove", sb, ag.Remove(ctx, path, recursive))
}

// Rename moves from to to inside p's sandbox.
func (s *Files) Rename(ctx context.Context, p sandbox.Principal, name, from, to string) (sandbox.FileInfo, error) {
	sb, ag, err := s.run.running(ctx, p, name)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	info, err := ag.Rename(ctx, from, to)
	return info, s.agentErr("rename", sb, err)
}

// Chmod sets the permission bits of the file at path.
func (s *Files) Chmod(ctx context.Context, p sandbox.Principal, name, path string, mode fs.FileMode) (sandbox.FileInfo, error) {
	sb, ag, err := s.run.running(ctx, p, name)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	info, err := ag.Chmod(ctx, path, mode)
	return info, s.agentErr("chmod", sb, err)
}
