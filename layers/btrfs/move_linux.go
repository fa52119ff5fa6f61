package btrfs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/layers"
)

var _ layers.Mover = (*Store)(nil)

// A moved snapshot travels as btrfs's own send stream (`btrfs send`,
// `btrfs receive`), after a header line of JSON (sendHeader) naming the
// sender's parent. An incremental stream names its parent by the
// parent's UUID and ctransid, which only the sender's filesystem has; the
// receiver's copy of the same image has others. So Receive makes a
// read-only snapshot of its own copy that claims to have been received
// from the sender's parent (BTRFS_IOC_SET_RECEIVED_SUBVOL), which is
// where `btrfs receive` looks for a parent, and applies the stream on it:
// only what the sandbox wrote crosses the wire, and the result shares the
// image's extents. Both run in a directory of their own under moving/,
// which Open empties; `btrfs receive` runs chrooted there, so no path in
// a stream reaches outside it.

// sendHeader is the first line of a stream Send writes.
type sendHeader struct {
	// Version is 1.
	Version int `json:"hearth_layers_send"`
	// ParentUUID (hex) and ParentCtransid identify the sender's parent;
	// ParentUUID is "" for a whole snapshot.
	ParentUUID     string `json:"parent_uuid,omitempty"`
	ParentCtransid uint64 `json:"parent_ctransid,omitempty"`
	// Committed says the sender's key was committed: so is the
	// receiver's.
	Committed bool `json:"committed,omitempty"`
}

// maxHeader bounds the header line Receive reads.
const maxHeader = 4096

// btrfsTimespec is struct btrfs_ioctl_timespec.
type btrfsTimespec struct {
	sec  uint64
	nsec uint32
	_    [4]byte
}

// btrfsGetSubvolInfoArgs is struct btrfs_ioctl_get_subvol_info_args.
type btrfsGetSubvolInfoArgs struct {
	treeid                                 uint64
	name                                   [256]byte
	parentID, dirid, generation, flags     uint64
	uuid, parentUUID, receivedUUID         [16]byte
	ctransid, otransid, stransid, rtransid uint64
	ctime, otime, stime, rtime             btrfsTimespec
	reserved                               [8]uint64
}

// btrfsReceivedSubvolArgs is struct btrfs_ioctl_received_subvol_args.
type btrfsReceivedSubvolArgs struct {
	uuid     [16]byte
	stransid uint64
	rtransid uint64
	stime    btrfsTimespec
	rtime    btrfsTimespec
	flags    uint64
	reserved [16]uint64
}

var (
	iocSetReceivedSubvol = ioc(iocRead|iocWrite, btrfsIoctlMagic, 37, unsafe.Sizeof(btrfsReceivedSubvolArgs{}))
	iocGetSubvolInfo     = ioc(iocRead, btrfsIoctlMagic, 60, unsafe.Sizeof(btrfsGetSubvolInfoArgs{}))
)

// subvolIdentity returns the UUID and ctransid of the subvolume path.
func subvolIdentity(path string) ([16]byte, uint64, error) {
	fd, err := openDir(path)
	if err != nil {
		return [16]byte{}, 0, err
	}
	defer unix.Close(fd)
	var args btrfsGetSubvolInfoArgs
	if err := ioctl(fd, iocGetSubvolInfo, unsafe.Pointer(&args)); err != nil {
		return [16]byte{}, 0, &os.PathError{Op: "btrfs subvolume info", Path: path, Err: err}
	}
	return args.uuid, args.ctransid, nil
}

// setReceived marks the writable subvolume path as received from the
// subvolume uuid at its ctransid stransid (all zero: as received from
// nothing).
func setReceived(path string, uuid [16]byte, stransid uint64) error {
	fd, err := openDir(path)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	args := btrfsReceivedSubvolArgs{uuid: uuid, stransid: stransid}
	if err := ioctl(fd, iocSetReceivedSubvol, unsafe.Pointer(&args)); err != nil {
		return &os.PathError{Op: "btrfs set received subvolume", Path: path, Err: err}
	}
	return nil
}

// Send implements layers.Mover: `btrfs send` of a read-only snapshot of
// key (of key itself when it is committed), against base when there is
// one.
func (s *Store) Send(ctx context.Context, key, base string, w io.Writer) error {
	if err := layers.CheckArgs(ctx, key, base); err != nil {
		return err
	}
	s.mu.Lock()
	e, err := s.active("send", key)
	committed := false
	if errors.Is(err, layers.ErrInvalid) && !s.closed {
		// A committed key is sent as it is.
		e, err = s.entries.Committed("send", key, key)
		committed = err == nil
	}
	var p *entry
	if err == nil && base != "" {
		p, err = s.entries.Committed("send", key, base)
	}
	if err != nil {
		s.mu.Unlock()
		return err
	}
	e.Read()
	if p != nil {
		p.Read()
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		e.Release()
		if p != nil {
			p.Release()
		}
	}()

	src := s.subvols.path(e.ID)
	if !committed {
		stage, err := s.stages.make()
		if err != nil {
			return fmt.Errorf("send %q: %w", key, err)
		}
		defer s.stages.remove(stage)
		if err := snapshot(src, stage, "root", true); err != nil {
			return fmt.Errorf("send %q: %w", key, err)
		}
		src = filepath.Join(stage, "root")
	}
	h := sendHeader{Version: 1, Committed: committed}
	args := []string{"-q", "send"}
	if p != nil {
		uuid, ctransid, err := subvolIdentity(s.subvols.path(p.ID))
		if err != nil {
			return fmt.Errorf("send %q: %w", key, err)
		}
		h.ParentUUID, h.ParentCtransid = hex.EncodeToString(uuid[:]), ctransid
		args = append(args, "-p", s.subvols.path(p.ID))
	}
	line, _ := json.Marshal(h)
	if _, err := w.Write(append(line, '\n')); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "btrfs", append(args, src)...)
	cmd.Stdout = w
	if err := run(cmd); err != nil {
		return fmt.Errorf("send %q: %w", key, err)
	}
	return nil
}

// Receive implements layers.Mover: `btrfs receive`, chrooted in a
// directory of its own, on a snapshot of parent marked as received from
// the sender's parent; the result becomes key.
func (s *Store) Receive(ctx context.Context, key, parent string, r io.Reader) (string, error) {
	if err := layers.CheckArgs(ctx, key, parent); err != nil {
		return "", err
	}
	br := bufio.NewReaderSize(r, maxHeader)
	h, err := readSendHeader(br)
	if err != nil {
		return "", fmt.Errorf("receive %q: %w", key, err)
	}
	if (h.ParentUUID != "") != (parent != "") {
		return "", fmt.Errorf("%w: receive %q: the stream was sent against a parent (%t), and a parent was named (%t): want both or neither",
			layers.ErrInvalid, key, h.ParentUUID != "", parent != "")
	}
	kind := layers.KindActive
	if h.Committed {
		kind = layers.KindCommitted
	}
	e, p, err := s.reserve("receive", key, parent, kind)
	if err != nil {
		return "", err
	}
	if err := s.settle(key, e, p, s.receive(ctx, key, e.record, h, br)); err != nil {
		return "", fmt.Errorf("receive %q: %w", key, err)
	}
	return s.subvols.path(e.ID), nil
}

// readSendHeader reads and checks the header line of a stream.
func readSendHeader(br *bufio.Reader) (sendHeader, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return sendHeader{}, fmt.Errorf("%w: not a stream Send wrote: reading its header: %v", layers.ErrInvalid, err)
	}
	var h sendHeader
	if err := json.Unmarshal(line, &h); err != nil || h.Version != 1 {
		return sendHeader{}, fmt.Errorf("%w: not a stream Send wrote (header %.64q)", layers.ErrInvalid, line)
	}
	if h.ParentUUID != "" {
		if b, err := hex.DecodeString(h.ParentUUID); err != nil || len(b) != 16 {
			return sendHeader{}, fmt.Errorf("%w: the stream's parent UUID %q is not 16 bytes of hex", layers.ErrInvalid, h.ParentUUID)
		}
	}
	return h, nil
}

// receive makes r's snapshot the subvolume of r.ID, with key's record:
// the record, then a rename into snapshots/ and a syncfs (the commit
// point; Open drops a record whose subvolume is missing).
func (s *Store) receive(ctx context.Context, key string, rec record, h sendHeader, r io.Reader) error {
	stage, err := s.stages.make()
	if err != nil {
		return err
	}
	defer s.stages.remove(stage)
	if rec.ParentID != "" {
		if err := s.markBase(stage, rec.ParentID, h); err != nil {
			return err
		}
	}
	cmd := exec.CommandContext(ctx, "btrfs", "-q", "receive", "-e", "-C", stage)
	cmd.Stdin = r
	if err := run(cmd); err != nil {
		return fmt.Errorf("%w: %v", layers.ErrInvalid, err)
	}
	got, err := received(stage)
	if err != nil {
		return err
	}
	if err := setReadonly(got, false); err != nil {
		return err
	}
	// A writable snapshot that claims to be a received one would pass
	// for a parent of later streams: it claims nothing.
	if err := setReceived(got, [16]byte{}, 0); err != nil {
		return err
	}
	if err := s.records.write(key, rec); err != nil {
		return err
	}
	err = os.Rename(got, s.subvols.path(rec.ID))
	if err == nil && rec.Kind == layers.KindCommitted {
		// Read-only once in place (Open sets the flag of a committed
		// record whose subvolume a crash left writable).
		err = setReadonly(s.subvols.path(rec.ID), true)
	}
	if err == nil {
		err = layers.Syncfs(s.snapDir)
	}
	if err != nil {
		if rerr := s.records.remove(key); rerr != nil {
			s.log.Error("layers: cleaning up failed receive", "key", key, "err", rerr)
		}
		if _, serr := os.Lstat(s.subvols.path(rec.ID)); serr == nil {
			if derr := s.subvols.destroy(rec.ID); derr != nil {
				s.log.Error("layers: cleaning up failed receive", "key", key, "err", derr)
			}
		}
		return err
	}
	return nil
}

// markBase makes stage/base: a read-only snapshot of the subvolume
// parentID that `btrfs receive` takes for the sender's parent h names.
func (s *Store) markBase(stage, parentID string, h sendHeader) error {
	if err := snapshot(s.subvols.path(parentID), stage, "base", false); err != nil {
		return err
	}
	var uuid [16]byte
	hex.Decode(uuid[:], []byte(h.ParentUUID)) // checked by readSendHeader
	base := filepath.Join(stage, "base")
	if err := setReceived(base, uuid, h.ParentCtransid); err != nil {
		return err
	}
	return setReadonly(base, true)
}

// received returns the one subvolume a receive made in stage.
func received(stage string) (string, error) {
	des, err := os.ReadDir(stage)
	if err != nil {
		return "", err
	}
	var got []string
	for _, de := range des {
		if de.Name() != "base" {
			got = append(got, filepath.Join(stage, de.Name()))
		}
	}
	if len(got) != 1 {
		return "", fmt.Errorf("%w: the stream made %d entries, want one snapshot", layers.ErrInvalid, len(got))
	}
	if ok, err := isSubvolume(got[0]); err != nil || !ok {
		return "", fmt.Errorf("%w: the stream made %s, which is not a snapshot", layers.ErrInvalid, filepath.Base(got[0]))
	}
	return got[0], nil
}

// stages is the directory of Send's and Receive's stages, moving/ under
// a store's Dir: each a directory of its own, with the snapshots one call
// makes.
type stages struct {
	dir string
	log *slog.Logger
}

// make makes an empty stage for one Send or Receive.
func (st stages) make() (string, error) {
	if err := os.Mkdir(st.dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	stage := filepath.Join(st.dir, layers.NewID())
	if err := os.Mkdir(stage, 0o700); err != nil {
		return "", err
	}
	return stage, nil
}

// remove deletes stage and the snapshots in it, logging a failure.
func (st stages) remove(stage string) {
	if err := removeStage(stage); err != nil {
		st.log.Error("layers: removing a send or receive's stage", "dir", stage, "err", err)
	}
}

// removeStage deletes stage: its subvolumes, then the rest.
func removeStage(stage string) error {
	des, err := os.ReadDir(stage)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, de := range des {
		p := filepath.Join(stage, de.Name())
		if ok, err := isSubvolume(p); err == nil && ok {
			if err := destroyTree(stage, de.Name()); err != nil {
				return err
			}
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return os.Remove(stage)
}

// clear removes what Sends and Receives cut short by a crash left (from
// Open).
func (st stages) clear() error {
	des, err := os.ReadDir(st.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, de := range des {
		st.log.Info("layers: removing an unfinished send or receive", "dir", de.Name())
		if err := removeStage(filepath.Join(st.dir, de.Name())); err != nil {
			return err
		}
	}
	return nil
}

// run runs cmd, whose error names what it wrote to stderr.
func run(cmd *exec.Cmd) error {
	var stderr bytes.Buffer
	cmd.Stderr = &limitedBuffer{b: &stderr, n: 4096}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(cmd.Args[:3], " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// limitedBuffer keeps the first n bytes written to it.
type limitedBuffer struct {
	b *bytes.Buffer
	n int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
