package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// File operations run with the sandbox user's ids (see asUser): the kernel
// refuses them what it refuses the user in a shell, and what they create is
// the user's.

const (
	// readChunk is the payload size of the data frames of a read.
	readChunk = 256 << 10
	// listBatch is the size above which a list's data frame is sent.
	listBatch = 256 << 10
	// drainTimeout bounds how long a failed write reads the rest of its
	// input, so that the caller, still sending, sees the error frame rather
	// than a reset connection.
	drainTimeout = 5 * time.Second
	// maxLinks is how many symlinks a write follows, as the kernel's
	// MAXSYMLINKS.
	maxLinks = 40
)

// readFile streams the file at path as data frames, then its FileInfo. An
// error found before the first byte (not found, a directory) is the only
// frame, so the daemon can still answer with an HTTP error. The file is
// opened as the sandbox user; the content is streamed from the open file
// as the agent, so that the thread is not held while the caller reads.
func (s *Server) readFile(conn net.Conn, path string, log *slog.Logger) {
	var f *os.File
	var info sandbox.FileInfo
	var err error
	if serr := s.asUser(func() { f, info, err = s.openRead(path) }); serr != nil {
		err = serr
	}
	if err != nil {
		s.failLogged(conn, log, err)
		return
	}
	defer f.Close()
	buf := make([]byte, headerLen+readChunk)
	for {
		n, err := f.Read(buf[headerLen:])
		if n > 0 {
			if werr := writeFramed(conn, FrameData, buf[:headerLen+n]); werr != nil {
				return // the caller went away
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			// After data was sent the error still ends the stream, so the
			// daemon can abort rather than deliver a short file as whole.
			s.failLogged(conn, log, fsError(err, info.Path))
			return
		}
	}
	WriteJSON(conn, FrameResult, info)
}

// openRead opens the regular file at path for reading and describes it.
func (s *Server) openRead(path string) (*os.File, sandbox.FileInfo, error) {
	p, err := s.resolve(path)
	if err != nil {
		return nil, sandbox.FileInfo{}, err
	}
	// O_NONBLOCK so that opening a FIFO does not wait for a writer; it has
	// no effect on the regular files read. Opening a socket fails (ENXIO),
	// as may a device's: notRegular says what the path is.
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if fi, serr := os.Stat(p); serr == nil && !fi.Mode().IsRegular() {
			err = notRegular(p, fi)
		}
		return nil, sandbox.FileInfo{}, fsError(err, p)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = notRegular(p, fi)
	}
	if err != nil {
		f.Close()
		return nil, sandbox.FileInfo{}, fsError(err, p)
	}
	var o owners
	return f, o.describe(p, fi), nil
}

// notRegular is the error for reading path, which fi says is not a
// regular file: a directory, a socket, a FIFO, a device.
func notRegular(path string, fi fs.FileInfo) error {
	if fi.IsDir() {
		return fileError(syscall.EISDIR, sandbox.CodeInvalidArgument, "%s is a directory", path).WithHint("list it instead")
	}
	kind := "not a regular file"
	switch m := fi.Mode(); {
	case m&fs.ModeSocket != 0:
		kind = "a socket"
	case m&fs.ModeNamedPipe != 0:
		kind = "a FIFO"
	case m&fs.ModeDevice != 0:
		kind = "a device"
	}
	return fileError(syscall.EINVAL, sandbox.CodeInvalidArgument, "%s is %s: only regular files can be read", path, kind).
		WithHint("run a command to read from sockets, pipes or devices")
}

// writeFile stores the data frames that follow the request into the file,
// atomically: the content goes to a temporary file in the target's
// directory, which replaces the target only after FrameEOF, fsync and a
// size within MaxBytes. Any failure (too large, the connection breaking,
// a full disk) removes the temporary file and leaves the target untouched.
// Writing through a symlink writes its target; an existing file keeps its
// mode unless SetMode, and its owner and group where the user may set them
// (see write.finish); a new one gets Mode (0644 when zero) and belongs to
// the sandbox user. The user must be allowed to create the temporary file
// and to rename it over the target, as with mv in a shell: both are done
// as the user, while the content goes into the open temporary file as the
// agent, so that the thread is not held while the caller sends.
func (s *Server) writeFile(conn net.Conn, req sandbox.WriteRequest, log *slog.Logger) {
	var w *write
	var err error
	if serr := s.asUser(func() { w, err = s.beginWrite(req) }); serr != nil {
		err = serr
	}
	if err != nil {
		s.failLogged(conn, log, err)
		drainInput(conn)
		return
	}
	if err := w.receive(conn, req.MaxBytes); err != nil {
		if s.asUser(w.discard) != nil {
			w.discard()
		}
		if errors.Is(err, errBroken) {
			log.Info("write abandoned: the connection broke before the end of the content", "path", w.path)
			return
		}
		s.failLogged(conn, log, err)
		drainInput(conn)
		return
	}
	var info sandbox.FileInfo
	if serr := s.asUser(func() { info, err = w.commit() }); serr != nil {
		w.discard()
		err = serr
	}
	if err != nil {
		s.failLogged(conn, log, err)
		return
	}
	WriteJSON(conn, FrameResult, info)
}

// write is a write under way: its target and what the new file gets, and
// the temporary file its content goes to.
type write struct {
	path, target string // as named (resolved), and the file written (symlinks followed)
	mode         fs.FileMode
	uid, gid     int
	tmp          *os.File
}

// beginWrite checks req's target and creates the temporary file beside it
// (and the missing parents, with req.Parents).
func (s *Server) beginWrite(req sandbox.WriteRequest) (*write, error) {
	p, err := s.resolve(req.Path)
	if err != nil {
		return nil, err
	}
	target, err := followLinks(p)
	if err != nil {
		return nil, err
	}
	w := &write{path: p, target: target, mode: req.Mode & modeBits, uid: s.opts.UID, gid: s.opts.GID}
	if w.mode == 0 {
		w.mode = 0o644
	}
	switch fi, err := os.Lstat(target); {
	case err == nil && fi.IsDir():
		return nil, fileError(syscall.EISDIR, sandbox.CodeInvalidArgument, "%s is a directory", p).WithHint("write to a file path inside it")
	case err == nil && !fi.Mode().IsRegular():
		return nil, fileError(syscall.EINVAL, sandbox.CodeInvalidArgument, "%s is not a regular file", p)
	case err == nil:
		if !req.SetMode {
			w.mode = fi.Mode() & modeBits
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			w.uid, w.gid = int(st.Uid), int(st.Gid)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fsError(err, p)
	}
	dir := filepath.Dir(target)
	if req.Parents {
		if err := s.mkdirAll(dir); err != nil {
			return nil, err
		}
	}
	if w.tmp, err = os.CreateTemp(dir, ".hearth-write-*"); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = fileError(syscall.ENOENT, sandbox.CodeNotFound, "no such directory: %s", dir).
				WithHint("create it first, or write with parents")
		}
		return nil, fsError(err, p)
	}
	return w, nil
}

// receive writes the data frames up to FrameEOF into the temporary file:
// too_large past maxBytes (when positive), errBroken when the connection
// breaks.
func (w *write) receive(conn net.Conn, maxBytes int64) error {
	var written int64
	buf := make([]byte, 64<<10)
	for {
		kind, payload, err := ReadFrame(conn, buf)
		if err != nil {
			return fmt.Errorf("%w: %v", errBroken, err)
		}
		buf = payload
		switch kind {
		case FrameData:
			written += int64(len(payload))
			if maxBytes > 0 && written > maxBytes {
				return fileError(syscall.EFBIG, sandbox.CodeTooLarge, "content for %s exceeds the limit of %d bytes", w.path, maxBytes).
					WithHint("write a smaller file").With("max_bytes", maxBytes)
			}
			if _, err := w.tmp.Write(payload); err != nil {
				return fsError(err, w.path)
			}
		case FrameEOF:
			return nil
		default:
			return sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: unexpected frame %q in a write", kind)
		}
	}
}

// commit renames the finished temporary file over the target and
// describes the result; on any error it discards the temporary file.
func (w *write) commit() (sandbox.FileInfo, error) {
	err := w.finish()
	if err == nil {
		err = os.Rename(w.tmp.Name(), w.target)
	}
	if err != nil {
		w.discard()
		return sandbox.FileInfo{}, fsError(err, w.path)
	}
	var o owners
	return o.fileInfo(w.target, false)
}

// discard removes the temporary file, so that an error means nothing was
// kept.
func (w *write) discard() {
	w.tmp.Close()
	os.Remove(w.tmp.Name())
}

// finish gives the temporary file the owner and group of the file it
// replaces where the user may (its own uid, its own group; as mv does, a
// file of another owner that the user may replace becomes the user's), and
// the mode (in that order: chown clears setuid and setgid), flushes it to
// disk and closes it.
func (w *write) finish() error {
	fi, err := w.tmp.Stat()
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && (int(st.Uid) != w.uid || int(st.Gid) != w.gid) {
		if err := w.tmp.Chown(w.uid, w.gid); err != nil && !errors.Is(err, syscall.EPERM) {
			return err
		}
	}
	if err := w.tmp.Chmod(w.mode); err != nil {
		return err
	}
	if err := w.tmp.Sync(); err != nil {
		return err
	}
	return w.tmp.Close()
}

// drainInput reads and discards what the caller still sends after a failed
// write, up to its FrameEOF, the connection's end or drainTimeout.
func drainInput(conn net.Conn) {
	conn.SetReadDeadline(time.Now().Add(drainTimeout))
	buf := make([]byte, 64<<10)
	for {
		kind, payload, err := ReadFrame(conn, buf)
		if err != nil || kind == FrameEOF {
			return
		}
		buf = payload
	}
}

// followLinks resolves p while it is a symlink, so that a write replaces
// the link's target rather than the link. A dangling link resolves to the
// path it names, which the write creates. Relative targets are joined to
// the link's directory lexically.
func followLinks(p string) (string, error) {
	orig := p
	for range maxLinks {
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			return p, nil
		}
		t, err := os.Readlink(p)
		if err != nil {
			return "", fsError(err, orig)
		}
		if !filepath.IsAbs(t) {
			t = filepath.Join(filepath.Dir(p), t)
		}
		p = filepath.Clean(t)
	}
	return "", fsError(syscall.ELOOP, orig)
}

// mkdirAll creates p and its missing parents, each with mode 0755 (and so
// owned by the sandbox user); existing directories are left as they are.
func (s *Server) mkdirAll(p string) error {
	fi, err := os.Stat(p)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return fileError(syscall.EEXIST, sandbox.CodeAlreadyExists, "%s exists and is not a directory", p)
	case !errors.Is(err, fs.ErrNotExist):
		return fsError(err, p)
	}
	if parent := filepath.Dir(p); parent != p {
		if err := s.mkdirAll(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(p, 0o755); err != nil {
		if fi, serr := os.Stat(p); serr == nil && fi.IsDir() {
			return nil // made meanwhile by someone else
		}
		return fsError(err, p)
	}
	// Mkdir's mode passed through the agent's umask; set it exactly.
	if err := os.Chmod(p, 0o755); err != nil {
		return fsError(err, p)
	}
	return nil
}

// list sends the entries of the directory at path, sorted by name, in data
// frames of JSON arrays, then a ListResult.
func (s *Server) list(conn net.Conn, path string, log *slog.Logger) {
	p, err := s.resolve(path)
	if err != nil {
		s.fail(conn, err)
		return
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			err = fileError(syscall.ENOTDIR, sandbox.CodeInvalidArgument, "%s is not a directory", p).WithHint("stat it instead")
		}
		s.failLogged(conn, log, fsError(err, p))
		return
	}
	var o owners
	batch := []byte{'['}
	count := 0
	flush := func() error {
		if len(batch) == 1 {
			return nil
		}
		batch[len(batch)-1] = ']' // the trailing comma
		err := WriteFrame(conn, FrameData, batch)
		batch = append(batch[:0], '[')
		return err
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			continue // removed since the directory was read
		}
		b, err := json.Marshal(o.describe(filepath.Join(p, e.Name()), fi))
		if err != nil {
			continue
		}
		batch = append(append(batch, b...), ',')
		count++
		if len(batch) >= listBatch {
			if err := flush(); err != nil {
				return
			}
		}
	}
	if err := flush(); err != nil {
		return
	}
	WriteJSON(conn, FrameResult, ListResult{Count: count})
}

// stat describes the file at path without following a final symlink.
func (s *Server) stat(path string) (sandbox.FileInfo, error) {
	p, err := s.resolve(path)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	var o owners
	return o.fileInfo(p, false)
}

// mkdir creates the directory at path and its missing parents (mkdir -p),
// as the sandbox user. An existing directory is not an error.
func (s *Server) mkdir(path string) (sandbox.FileInfo, error) {
	p, err := s.resolve(path)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	if err := s.mkdirAll(p); err != nil {
		return sandbox.FileInfo{}, err
	}
	var o owners
	return o.fileInfo(p, true)
}

// remove deletes the file, symlink or empty directory at path; with
// recursive, a directory and everything below it. A missing path is
// not_found; "/" is refused.
func (s *Server) remove(path string, recursive bool) error {
	p, err := s.resolve(path)
	if err != nil {
		return err
	}
	if err := refuseRoot("remove", p); err != nil {
		return err
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return fsError(err, p)
	}
	switch {
	case !fi.IsDir():
		err = syscall.Unlink(p)
	case recursive:
		err = os.RemoveAll(p)
	default:
		err = syscall.Rmdir(p)
		if errors.Is(err, syscall.EEXIST) { // some file systems say so for a non-empty directory
			err = syscall.ENOTEMPTY
		}
	}
	return fsError(err, p)
}

// rename moves from to to, replacing a file at to but never a directory
// (already_exists). Neither may be "/".
func (s *Server) rename(from, to string) (sandbox.FileInfo, error) {
	src, err := s.resolve(from)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	dst, err := s.resolve(to)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	if err := refuseRoot("rename", src); err != nil {
		return sandbox.FileInfo{}, err
	}
	if err := refuseRoot("rename onto", dst); err != nil {
		return sandbox.FileInfo{}, err
	}
	if _, err := os.Lstat(src); err != nil {
		return sandbox.FileInfo{}, fsError(err, src)
	}
	if err := os.Rename(src, dst); err != nil {
		switch {
		case errors.Is(err, syscall.ENOENT):
			return sandbox.FileInfo{}, fileError(syscall.ENOENT, sandbox.CodeNotFound, "no such directory: %s", filepath.Dir(dst)).
				WithHint("create the destination's directory first")
		case errors.Is(err, syscall.EEXIST), errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EISDIR):
			return sandbox.FileInfo{}, fileError(syscall.EISDIR, sandbox.CodeAlreadyExists, "%s already exists and is a directory", dst).
				WithHint("remove it first, or rename to a path inside it")
		}
		return sandbox.FileInfo{}, fsError(err, src)
	}
	var o owners
	return o.fileInfo(dst, false)
}

// chmod sets the mode of the file at path (following a symlink): permission
// bits plus setuid, setgid and sticky, in fs.FileMode's encoding.
func (s *Server) chmod(path string, mode uint32) (sandbox.FileInfo, error) {
	p, err := s.resolve(path)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	if err := os.Chmod(p, fs.FileMode(mode)&modeBits); err != nil {
		return sandbox.FileInfo{}, fsError(err, p)
	}
	var o owners
	return o.fileInfo(p, true)
}
