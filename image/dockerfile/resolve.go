package dockerfile

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// MaxEntries is the most files, directories and symlinks one copy step
// may copy.
const MaxEntries = 1 << 20

// Copy is one source of a copy step as found in the context, and how it
// lands in the image: the executor unpacks the tar stream WriteTar writes
// into Dest, making Dest and its missing parents first (owned by Owner if
// given, else root; mode 0755), and making the missing parents of an
// entry the same way (an entry under a directory .dockerignore excludes).
type Copy struct {
	// Source is the path matched in the context, from its root ("." for
	// the root itself).
	Source string `json:"source"`
	// Dest is the absolute directory the tar unpacks into: the
	// destination of a directory's contents, the directory of a file's
	// destination.
	Dest string `json:"dest"`
	// Unpack: Source is a tar archive (plain, gzip or bzip2) an ADD
	// unpacks into Dest; Entries holds the archive alone.
	Unpack bool `json:"unpack,omitempty"`
	// Entries are what the tar holds, parents before children, each
	// directory's entries in name order: for a directory Source what is
	// under it, for a file Source the file.
	Entries []Entry `json:"entries"`
	// Owner and Chmod are the step's --chown and --chmod (the same
	// pointers as Step.Chown and Step.Chmod, so that resolving a named
	// owner once resolves it for every Copy of the step): the owner and
	// the permission bits of every entry (symlinks keep 0777); without
	// them entries belong to root and keep the context's bits.
	Owner *Owner  `json:"owner,omitempty"`
	Chmod *uint32 `json:"chmod,omitempty"`
}

// Entry is one file, directory or symlink a Copy copies.
type Entry struct {
	// Name is its name in the tar, relative to Copy.Dest.
	Name string `json:"name"`
	// Path is where it is in the context, from the root (symlinks on the
	// way to the Copy's source resolved).
	Path string `json:"path"`
	// Type is "file", "dir" or "symlink".
	Type string `json:"type"`
	// Mode is its permission bits in the context, with setuid, setgid and
	// sticky (07777).
	Mode uint32 `json:"mode"`
	// Size and Digest ("sha256:<hex>") are a file's content's.
	Size   int64  `json:"size,omitempty"`
	Digest string `json:"digest,omitempty"`
	// Link is a symlink's target, as written (never followed).
	Link string `json:"link,omitempty"`
}

// Entry types (Entry.Type).
const (
	TypeFile    = "file"
	TypeDir     = "dir"
	TypeSymlink = "symlink"
)

// Resolve finds every copy step's sources in bc (glob patterns expanded
// with path.Match, one path element at a time), hashes what they copy,
// and computes every step's Key. baseDigest is the From image's digest
// ("" for Scratch).
//
// A key is the hex SHA-256 of the previous step's key (for the first
// step, of From and baseDigest), the step's kind and Expanded
// instruction, the environment, working directory and user in effect,
// and for a copy step every entry's name, type, mode, size, content
// digest and link, with the step's owner and mode: two steps with equal
// keys give equal roots. Modification times are not in the key.
//
// Every refusal of a step is an *Error naming its line: a source
// missing or excluded (ErrNotFound), leading out of the context by a
// symlink (ErrEscapes), over MaxEntries (ErrTooLarge), a FIFO, a socket
// or a device to copy, an xz or zstd archive to ADD (ErrUnsupported). On
// an error p is unchanged.
func (p *Plan) Resolve(bc *Context, baseDigest string) error {
	if err := checkBase(p.From, baseDigest); err != nil {
		return err
	}
	steps := slices.Clone(p.Steps)
	key := baseKey(p.From, baseDigest)
	for i := range steps {
		st := &steps[i]
		st.Copies = nil
		if st.Kind == KindCopy {
			copies, err := bc.resolve(st)
			if err != nil {
				return &Error{Line: st.Line, Instruction: st.Instruction, Err: err}
			}
			st.Copies = copies
		}
		key = stepKey(key, st)
		st.Key = key
	}
	p.Steps, p.BaseDigest = steps, baseDigest
	return nil
}

// checkBase checks a base image digest against From.
func checkBase(from, digest string) error {
	switch {
	case from == Scratch && digest != "":
		return fmt.Errorf("dockerfile: FROM scratch has no digest, got %q", digest)
	case from != Scratch && !refDigest.MatchString(digest):
		return fmt.Errorf("dockerfile: base image %s: digest %q is not algorithm:hex", from, digest)
	}
	return nil
}

// resolve finds a copy step's sources.
func (c *Context) resolve(st *Step) ([]Copy, error) {
	var matches []string
	for _, src := range st.Sources {
		m, err := c.match(src)
		if err != nil {
			return nil, err
		}
		matches = append(matches, m...)
	}
	toDir := strings.HasSuffix(st.Dest, "/")
	if len(matches) > 1 && !toDir {
		return nil, fmt.Errorf("%w: the sources match %d paths: the destination must be a directory ending in /", ErrSyntax, len(matches))
	}
	var copies []Copy
	n := 0
	for _, m := range matches {
		cp, err := c.source(m, st, toDir, &n)
		if err != nil {
			return nil, err
		}
		copies = append(copies, cp)
	}
	return copies, nil
}

// hasMeta reports whether a source is a glob pattern.
func hasMeta(s string) bool { return strings.ContainsAny(s, `*?[\`) }

// match expands a source: a path names itself (if not excluded), a
// pattern the paths it matches in the context, in name order; no path is
// ErrNotFound, a match that is a symlink out of the context ErrEscapes.
func (c *Context) match(src string) ([]string, error) {
	if !hasMeta(src) {
		if ex, err := c.excluded(src); err != nil || ex {
			return nil, notFound(src, err)
		}
		return []string{src}, nil
	}
	if _, err := path.Match(src, ""); err != nil {
		return nil, fmt.Errorf("%w: source pattern %s: %v", ErrSyntax, src, err)
	}
	cur := []string{"."}
	for _, part := range strings.Split(src, "/") {
		var next []string
		for _, dir := range cur {
			if !hasMeta(part) {
				next = append(next, join(dir, part))
				continue
			}
			names, err := readNames(c.root, dir, true)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("source %s: %w", src, err)
			}
			for _, name := range names {
				if ok, _ := path.Match(part, name); ok {
					next = append(next, join(dir, name))
				}
			}
			if len(next) > MaxEntries {
				return nil, fmt.Errorf("source %s matches more than %d paths: %w", src, MaxEntries, ErrTooLarge)
			}
		}
		cur = next
	}
	var found []string
	for _, m := range cur {
		ex, err := c.excluded(m)
		if err != nil {
			return nil, err
		}
		fd, err := c.open(m)
		if errors.Is(err, ErrEscapes) && !ex {
			return nil, fmt.Errorf("source %s: %w", src, err)
		}
		if err == nil {
			unix.Close(fd)
		}
		if !ex && err == nil {
			found = append(found, m)
		}
	}
	if len(found) == 0 {
		return nil, notFound(src, nil)
	}
	return found, nil
}

// notFound is the error of a source that names nothing.
func notFound(src string, err error) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("source %s %w", src, ErrNotFound)
}

// source finds one matched path m: a directory copies what is under it
// into the destination, a file copies itself to the destination (or into
// it, toDir), an archive an ADD unpacks into it. n counts the step's
// entries.
func (c *Context) source(m string, st *Step, toDir bool, n *int) (Copy, error) {
	fd, err := c.open(m)
	if err != nil {
		return Copy{}, fmt.Errorf("source %w", err)
	}
	defer unix.Close(fd)
	real, err := c.relPath(fd, m)
	if err != nil {
		return Copy{}, fmt.Errorf("source %w", err)
	}
	if ex, err := c.excluded(real); err != nil || ex {
		return Copy{}, notFound(m, err)
	}
	var sys unix.Stat_t
	if err := unix.Fstat(fd, &sys); err != nil {
		return Copy{}, err
	}
	cp := Copy{Source: m, Dest: strings.TrimSuffix(st.Dest, "/"), Owner: st.Chown, Chmod: st.Chmod}
	if cp.Dest == "" {
		cp.Dest = "/"
	}
	switch sys.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		cp.Entries, err = c.walk(fd, real, n)
		return cp, err
	case unix.S_IFREG:
	default:
		return Copy{}, fmt.Errorf("source %s is %s: %w (a build copies files, directories and symlinks)", m, typeName(sys.Mode), ErrUnsupported)
	}
	e, err := c.fileEntry(fd, real)
	if err != nil {
		return Copy{}, err
	}
	*n++
	if st.Unpack {
		if cp.Unpack, err = c.isArchive(fd, m); err != nil {
			return Copy{}, err
		}
	}
	switch {
	case cp.Unpack:
		e.Name = path.Base(m)
	case toDir:
		e.Name = path.Base(m)
	default:
		cp.Dest, e.Name = path.Dir(st.Dest), path.Base(st.Dest)
	}
	cp.Entries = []Entry{e}
	return cp, nil
}

// fileEntry hashes the regular file fd (an O_PATH descriptor), at path
// rel in the context.
func (c *Context) fileEntry(fd int, rel string) (Entry, error) {
	var sys unix.Stat_t
	if err := unix.Fstat(fd, &sys); err != nil {
		return Entry{}, err
	}
	f, err := reopen(fd, rel)
	if err != nil {
		return Entry{}, err
	}
	defer f.Close()
	h := sha256.New()
	size, err := io.Copy(h, f)
	if err != nil {
		return Entry{}, fmt.Errorf("%s: %w", rel, err)
	}
	return Entry{Path: rel, Type: TypeFile, Mode: sys.Mode & 0o7777, Size: size, Digest: "sha256:" + hex.EncodeToString(h.Sum(nil))}, nil
}

// walk lists what is under the directory src (an O_PATH descriptor, at
// path real in the context), depth first, in name order, following no
// symlink: a symlink is an entry of its own. A path .dockerignore
// excludes is left out (and, unless some pattern re-includes paths,
// what is under it).
func (c *Context) walk(src int, real string, n *int) ([]Entry, error) {
	var out []Entry
	var visit func(rel string) error
	visit = func(rel string) error {
		names, err := readNames(src, rel, false)
		if err != nil {
			return fmt.Errorf("%s: %w", join(real, rel), err)
		}
		for _, name := range names {
			child := join(rel, name)
			e, isDir, err := c.walkEntry(src, child, join(real, child))
			if err != nil {
				return err
			}
			if e != nil {
				if *n++; *n > MaxEntries {
					return fmt.Errorf("more than %d files: %w", MaxEntries, ErrTooLarge)
				}
				out = append(out, *e)
			}
			if isDir && (e != nil || c.exceptions()) {
				if err := visit(child); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return out, visit(".")
}

// walkEntry reads child, a path under src, at ctx in the context: its
// entry (nil if excluded) and whether it is a directory.
func (c *Context) walkEntry(src int, child, ctx string) (*Entry, bool, error) {
	fd, err := openat2(src, child, unix.O_PATH|unix.O_NOFOLLOW, resolveBeneath|unix.RESOLVE_NO_SYMLINKS)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", ctx, err)
	}
	defer unix.Close(fd)
	var sys unix.Stat_t
	if err := unix.Fstat(fd, &sys); err != nil {
		return nil, false, err
	}
	isDir := sys.Mode&unix.S_IFMT == unix.S_IFDIR
	if ex, err := c.excluded(ctx); err != nil || ex {
		return nil, isDir, err
	}
	e := Entry{Name: child, Path: ctx, Mode: sys.Mode & 0o7777}
	switch sys.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		e.Type = TypeDir
	case unix.S_IFLNK:
		e.Type, e.Mode = TypeSymlink, 0o777
		if e.Link, err = readlink(fd); err != nil {
			return nil, false, fmt.Errorf("%s: %w", ctx, err)
		}
	case unix.S_IFREG:
		f, err := c.fileEntry(fd, ctx)
		if err != nil {
			return nil, false, err
		}
		f.Name = child
		e = f
	default:
		return nil, false, fmt.Errorf("%s is %s: %w (a build copies files, directories and symlinks; exclude it in .dockerignore)", ctx, typeName(sys.Mode), ErrUnsupported)
	}
	return &e, isDir, nil
}

// readlink reads the target of a symlink held by an O_PATH descriptor.
func readlink(fd int) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
