package btrfs_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hearth/hearth/layers"
	"github.com/hearth/hearth/layers/btrfs"
)

// imageBytes is the size of the big file of the test image.
const imageBytes = 16 << 20

// makeImage commits the image "img" in s: the same content in every store
// it is made in, as a node's copy of an image is.
func makeImage(t *testing.T, s *btrfs.Store) {
	t.Helper()
	ctx := context.Background()
	p, err := s.Prepare(ctx, "img-make", "")
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, imageBytes)
	rand.New(rand.NewSource(1)).Read(big) // the same bytes each time
	for name, data := range map[string][]byte{"usr/lib/big": big, "etc/hostname": []byte("img\n"), "etc/gone": []byte("x"), "bin/tool": []byte("#!/bin/sh\n")} {
		writeFile(t, filepath.Join(p, name), data, 0o644)
	}
	os.Chmod(filepath.Join(p, "bin/tool"), 0o755)
	if err := os.Symlink("../usr/lib/big", filepath.Join(p, "bin/link")); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, "img", "img-make"); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
}

// tree describes every file under root: type, mode, owner, size, and a
// hash of its content or its link's target.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		desc := fmt.Sprintf("%v %d:%d %d", fi.Mode(), st.Uid, st.Gid, fi.Size())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" %x", sha256.Sum256(b))
		}
		rel, _ := filepath.Rel(root, p)
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// emptyMoving fails unless s has no send or receive in the making.
func emptyMoving(t *testing.T, s *btrfs.Store) {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(s.Dir(), "moving"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	if len(des) != 0 {
		t.Errorf("moving/ holds %d entries after the call, want none", len(des))
	}
}

// TestMove: a sandbox's root prepared from an image on one store arrives
// on another store that holds its own copy of the image with every file,
// mode, owner and link, carrying only what the sandbox wrote, and is a
// writable root of that copy there.
func TestMove(t *testing.T) {
	ctx := context.Background()
	a, b := openStore(t), openStore(t)
	makeImage(t, a)
	makeImage(t, b)
	root, err := a.Prepare(ctx, "root", "img")
	if err != nil {
		t.Fatal(err)
	}
	wrote := make([]byte, 1<<20)
	rand.New(rand.NewSource(2)).Read(wrote)
	writeFile(t, filepath.Join(root, "home/sandbox/data"), wrote, 0o600)
	writeFile(t, filepath.Join(root, "etc/hostname"), []byte("moved\n"), 0o644)
	os.Remove(filepath.Join(root, "etc/gone"))
	os.Rename(filepath.Join(root, "bin/tool"), filepath.Join(root, "bin/tool2"))
	os.Link(filepath.Join(root, "home/sandbox/data"), filepath.Join(root, "home/sandbox/hard"))
	os.Chown(filepath.Join(root, "home/sandbox"), 1000, 1000)
	os.Chmod(filepath.Join(root, "usr/lib/big"), 0o600)
	want := tree(t, root)

	var stream bytes.Buffer
	if err := a.Send(ctx, "root", "img", &stream); err != nil {
		t.Fatalf("Send = %v", err)
	}
	if stream.Len() > len(wrote)+256<<10 {
		t.Errorf("the stream is %d bytes for %d written on a %d-byte image: want what was written only", stream.Len(), len(wrote), imageBytes)
	}
	got, err := b.Receive(ctx, "root", "img", &stream)
	if err != nil {
		t.Fatalf("Receive = %v", err)
	}
	if g := tree(t, got); !mapsEqual(g, want) {
		t.Errorf("received tree differs:\n got %v\nwant %v", g, want)
	}
	info, err := b.Stat(ctx, "root")
	if err != nil || info.Kind != layers.KindActive || info.Parent != "img" || info.Path != got {
		t.Errorf("Stat(root) on the receiver = %+v, %v; want active, parent img, at %s", info, err, got)
	}
	if u, err := b.Usage(ctx, "root"); err != nil || u < int64(len(wrote)) || u > imageBytes/2 {
		t.Errorf("Usage(root) on the receiver = %d, %v; want about the %d bytes written, not the image", u, err, len(wrote))
	}
	if err := os.WriteFile(filepath.Join(got, "after"), []byte("x"), 0o644); err != nil {
		t.Errorf("the received root is not writable: %v", err)
	}
	if _, err := b.Prepare(ctx, "fork", "img"); err != nil {
		t.Errorf("Prepare from the image after a receive on it = %v", err)
	}
	emptyMoving(t, a)
	emptyMoving(t, b)

	// The sender keeps its root, and a second receive of the name fails.
	if _, err := a.Stat(ctx, "root"); err != nil {
		t.Errorf("Stat(root) on the sender after Send = %v", err)
	}
	stream.Reset()
	if err := a.Send(ctx, "root", "img", &stream); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Receive(ctx, "root", "img", &stream); !errors.Is(err, layers.ErrExists) {
		t.Errorf("Receive of a key taken = %v, want ErrExists", err)
	}
	// A fork's root, whose parent is a checkpoint the receiver lacks,
	// travels against the image all the same.
	if err := a.Snapshot(ctx, "ck", "root"); err != nil {
		t.Fatal(err)
	}
	forked, err := a.Prepare(ctx, "forked", "ck")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(forked, "home/sandbox/fork"), []byte("fork\n"), 0o644)
	stream.Reset()
	if err := a.Send(ctx, "forked", "img", &stream); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Receive(ctx, "forked", "img", &stream); err != nil || !mapsEqual(tree(t, got), tree(t, forked)) {
		t.Errorf("Receive of a fork's root = %v, or its tree differs", err)
	}
	// Checkpoints travel as committed snapshots, each against the one
	// before (the first against the image), and share as they did.
	writeFile(t, filepath.Join(root, "home/sandbox/later"), []byte("after ck\n"), 0o644)
	if err := a.Snapshot(ctx, "ck2", "root"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ key, base string }{{"ck", "img"}, {"ck2", "ck"}} {
		stream.Reset()
		if err := a.Send(ctx, c.key, c.base, &stream); err != nil {
			t.Fatalf("Send(%s against %s) = %v", c.key, c.base, err)
		}
		got, err := b.Receive(ctx, c.key, c.base, &stream)
		if err != nil {
			t.Fatalf("Receive(%s on %s) = %v", c.key, c.base, err)
		}
		src, _ := a.Stat(ctx, c.key)
		if info, err := b.Stat(ctx, c.key); err != nil || info.Kind != layers.KindCommitted || !mapsEqual(tree(t, got), tree(t, src.Path)) {
			t.Errorf("received %s = %+v, %v (or its tree differs); want committed, the same files", c.key, info, err)
		}
		if err := os.WriteFile(filepath.Join(got, "x"), nil, 0o644); err == nil {
			t.Errorf("received committed %s is writable", c.key)
		}
	}
	if restored, err := b.Reset(ctx, "root", "ck2"); err != nil {
		t.Errorf("Reset to a received checkpoint = %v", err)
	} else if data, err := os.ReadFile(filepath.Join(restored, "home/sandbox/later")); err != nil || string(data) != "after ck\n" {
		t.Errorf("after Reset to the received ck2: later = %q, %v", data, err)
	}
	// Across a reopen, what was received is as any other snapshot.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b2, err := btrfs.Open(ctx, btrfs.Options{Dir: b.Dir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if info, err := b2.Stat(ctx, "root"); err != nil || info.Kind != layers.KindActive || info.Parent != "ck2" {
		t.Errorf("Stat(root) after a reopen = %+v, %v; want active, reset to ck2", info, err)
	}
	if info, err := b2.Stat(ctx, "ck2"); err != nil || info.Kind != layers.KindCommitted || info.Parent != "ck" {
		t.Errorf("Stat(ck2) after a reopen = %+v, %v; want committed, received on ck", info, err)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestMoveWhole: a root with no parent travels whole, and only to a
// receiver that names none; a stream that is not Send's, or is cut
// short, leaves nothing behind.
func TestMoveWhole(t *testing.T) {
	ctx := context.Background()
	a, b := openStore(t), openStore(t)
	makeImage(t, b)
	root, err := a.Prepare(ctx, "solo", "")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "f"), []byte("whole\n"), 0o644)
	var stream bytes.Buffer
	if err := a.Send(ctx, "solo", "", &stream); err != nil {
		t.Fatal(err)
	}
	whole := stream.Bytes()
	if _, err := b.Receive(ctx, "solo", "img", bytes.NewReader(whole)); !errors.Is(err, layers.ErrInvalid) {
		t.Errorf("Receive of a whole stream on a parent = %v, want ErrInvalid", err)
	}
	for name, bad := range map[string][]byte{
		"garbage":   []byte("not a stream\n"),
		"no header": whole[bytes.IndexByte(whole, '\n')+1:],
		"cut short": whole[:len(whole)-200],
		"empty":     nil,
	} {
		if _, err := b.Receive(ctx, "solo", "", bytes.NewReader(bad)); !errors.Is(err, layers.ErrInvalid) {
			t.Errorf("Receive of %s = %v, want ErrInvalid", name, err)
		}
		if _, err := b.Stat(ctx, "solo"); !errors.Is(err, layers.ErrNotFound) {
			t.Errorf("after a failed Receive (%s): Stat = %v, want ErrNotFound", name, err)
		}
		emptyMoving(t, b)
	}
	got, err := b.Receive(ctx, "solo", "", bytes.NewReader(whole))
	if err != nil {
		t.Fatalf("Receive of a whole stream = %v", err)
	}
	if data, err := os.ReadFile(filepath.Join(got, "f")); err != nil || string(data) != "whole\n" {
		t.Errorf("received f = %q, %v", data, err)
	}
	if _, err := b.Receive(ctx, "x", "nope", bytes.NewReader(whole)); err == nil {
		t.Error("Receive on a missing parent succeeded")
	}
	if err := a.Send(ctx, "solo", "nope", &stream); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("Send against a missing base = %v, want ErrNotFound", err)
	}
}

// TestMoveLeftovers: what a crash in the middle of a Send or Receive
// left (a stage with a snapshot in it) is gone after a reopen.
func TestMoveLeftovers(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	stage := filepath.Join(s.Dir(), "moving", "cut")
	if err := os.MkdirAll(stage, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("btrfs", "subvolume", "create", filepath.Join(stage, "base")).CombinedOutput(); err != nil {
		t.Fatalf("btrfs subvolume create: %v: %s", err, out)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := btrfs.Open(ctx, btrfs.Options{Dir: s.Dir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	emptyMoving(t, s2)
}

// sendStream builds a btrfs send stream (version 1) of cmds, each a
// command number and its attributes (type, value), behind Send's header:
// what a hostile peer could send.
func sendStream(cmds ...streamCmd) []byte {
	var out bytes.Buffer
	out.WriteString(`{"hearth_layers_send":1}` + "\n")
	out.WriteString("btrfs-stream\x00")
	binary.Write(&out, binary.LittleEndian, uint32(1))
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	for _, c := range cmds {
		var body bytes.Buffer
		for _, a := range c.attrs {
			binary.Write(&body, binary.LittleEndian, a.typ)
			binary.Write(&body, binary.LittleEndian, uint16(len(a.val)))
			body.Write(a.val)
		}
		cmd := make([]byte, 10, 10+body.Len())
		binary.LittleEndian.PutUint32(cmd[0:], uint32(body.Len()))
		binary.LittleEndian.PutUint16(cmd[4:], c.cmd)
		cmd = append(cmd, body.Bytes()...)
		// btrfs's crc32c: seed 0, no inversions.
		binary.LittleEndian.PutUint32(cmd[6:], ^crc32.Update(^uint32(0), castagnoli, cmd))
		out.Write(cmd)
	}
	return out.Bytes()
}

type streamCmd struct {
	cmd   uint16
	attrs []streamAttr
}

type streamAttr struct {
	typ uint16
	val []byte
}

// Send stream commands and attributes (btrfs's send.h).
const (
	cmdSubvol  = 1
	cmdMkfile  = 3
	cmdSymlink = 8
	cmdWrite   = 15
	cmdEnd     = 21

	attrUUID     = 1
	attrCtransid = 2
	attrIno      = 3
	attrPath     = 15
	attrLink     = 17
	attrOffset   = 18
	attrData     = 19
)

func str(typ uint16, s string) streamAttr { return streamAttr{typ, []byte(s)} }

func u64(typ uint16, v uint64) streamAttr {
	return streamAttr{typ, binary.LittleEndian.AppendUint64(nil, v)}
}

// streamWriting is a stream of a snapshot "evil" whose commands make a
// symlink link -> target, then write "pwned" at path.
func streamWriting(link, target, path string) []byte {
	return sendStream(
		streamCmd{cmdSubvol, []streamAttr{str(attrPath, "evil"), {attrUUID, bytes.Repeat([]byte{7}, 16)}, u64(attrCtransid, 9)}},
		streamCmd{cmdSymlink, []streamAttr{str(attrPath, link), u64(attrIno, 300), str(attrLink, target)}},
		streamCmd{cmdMkfile, []streamAttr{str(attrPath, path), u64(attrIno, 301)}},
		streamCmd{cmdWrite, []streamAttr{str(attrPath, path), u64(attrOffset, 0), str(attrData, "pwned")}},
		streamCmd{cmdEnd, nil},
	)
}

// TestMoveHostileStream: a stream is attacker input (a sandbox chose
// every name and link in it, a peer may forge it whole). One whose paths
// lead through a symlink or ".." out of the snapshot writes nothing on
// the host and is refused, leaving nothing; the same stream aimed inside
// the snapshot is received (so the stream is well formed).
func TestMoveHostileStream(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	host := t.TempDir()
	got, err := s.Receive(ctx, "fine", "", bytes.NewReader(streamWriting("l", "sub", "f")))
	if err != nil {
		t.Fatalf("Receive of a well-formed forged stream = %v", err)
	}
	if data, err := os.ReadFile(filepath.Join(got, "f")); err != nil || string(data) != "pwned" {
		t.Fatalf("the forged stream's file = %q, %v", data, err)
	}
	for name, stream := range map[string][]byte{
		"through a symlink": streamWriting("esc", host, "esc/pwned"),
		"through ..":        streamWriting("l", "x", "../../../../../../.."+host+"/pwned"),
	} {
		if _, err := s.Receive(ctx, "evil", "", bytes.NewReader(stream)); err == nil {
			t.Errorf("%s: Receive succeeded", name)
		}
		if _, err := os.Lstat(filepath.Join(host, "pwned")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: the stream wrote %s on the host (%v)", name, filepath.Join(host, "pwned"), err)
		}
		if _, err := s.Stat(ctx, "evil"); !errors.Is(err, layers.ErrNotFound) {
			t.Errorf("%s: Stat(evil) after the refusal = %v, want ErrNotFound", name, err)
		}
		emptyMoving(t, s)
	}
}
