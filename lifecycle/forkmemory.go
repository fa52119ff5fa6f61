package lifecycle

import (
	"context"
	"errors"
	"maps"
	"sync"

	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// A fork of a memory checkpoint that goes to another node for room (see
// forkElsewhere) takes the checkpoint's memory image along: its
// checkpoint's node sends the fork's root, then the image, sealed as it
// is at rest, under the checkpoint's id, and the fork's row says so
// (movingWithMemory). The node that receives it keeps the image as a copy
// for as long as forks moving there count on it, and removes it once the
// last of them has started from it (or failed to), unless the
// checkpoint's own sandbox is there or moving there. Every receive of a
// memory image and that removal take the image's lock, so a receive
// either finds the copy a fork still counts on, or none and writes it
// anew. A copy whose fork will not start there (its node undid the
// create) goes at the next sweep, and one a daemon stop left behind at
// the next Recover: no row there owns it.

// memoryImageLock is the key of the lock of the memory image of
// checkpoint ck on this node.
func memoryImageLock(ck string) string { return "memory image " + ck }

// forkMemory keeps the memory images forks moving to this node received
// (see above): which fork counts on which checkpoint's image.
type forkMemory struct {
	*core
	mu sync.Mutex
	of map[string]moveMark // fork's sandbox id → what its row said of its move
}

// hold records that fork, moving here as mark says, counts on the memory
// image mark names.
func (f *forkMemory) hold(fork string, mark moveMark) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.of == nil {
		f.of = map[string]moveMark{}
	}
	f.of[fork] = mark
}

// unhold forgets what fork counted on, and says whether another fork
// still counts on checkpoint ck's image.
func (f *forkMemory) unhold(fork, ck string) (held bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.of, fork)
	for _, m := range f.of {
		if m.memory == ck {
			return true
		}
	}
	return false
}

// sweep releases what forks that will not start here counted on: a fork
// whose row is gone (its node undid the create) or says no more that it
// moves here from that image. The sweep runs it (sweeper.sweep).
func (f *forkMemory) sweep(ctx context.Context) {
	f.mu.Lock()
	held := maps.Clone(f.of)
	f.mu.Unlock()
	for fork, mark := range held {
		sb, err := f.opts.Store.Sandboxes().ByID(ctx, fork)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			f.log.Error("sweep: look up a fork moving here", "id", fork, "err", err)
			continue
		}
		if now, moving := movingToNode(sb.Reason, f.opts.NodeName); err == nil && sb.Status == sandbox.StatusCreating && moving && now.memory == mark.memory {
			continue
		}
		f.log.Warn("sweep: a fork that received a memory image here will not start here: releasing it", "id", fork, "checkpoint", mark.memory)
		f.release(ctx, fork, mark)
	}
}

// transfer is the transfer of the memory image that fork (a sandbox's
// id), being created and moving here from node from as mark says (see
// movesHere), resumes from: only a checkpoint with memory of the sandbox
// the row names, which runs on from, so that a node sends only what it
// holds itself.
func (f *forkMemory) transfer(ctx context.Context, fork string, mark moveMark, from string) (node.Transfer, error) {
	src, err := f.opts.Store.Sandboxes().ByID(ctx, mark.memoryOf)
	if err == nil && src.Node != from {
		err = store.ErrNotFound
	}
	var c sandbox.Checkpoint
	if err == nil {
		c, err = f.opts.Store.Checkpoints().Get(ctx, src.ID, mark.memory)
	}
	switch {
	case errors.Is(err, store.ErrNotFound) || err == nil && !c.Memory:
		return node.Transfer{}, sandbox.Errorf(sandbox.CodeNotFound, "node %s holds no memory checkpoint %s of sandbox %s", from, mark.memory, mark.memoryOf)
	case err != nil:
		return node.Transfer{}, f.internal("get the fork's checkpoint", err)
	}
	return node.Transfer{ID: fork, Checkpoint: mark.memory, Memory: true}, nil
}

// send sends cur, a fork moving to node target whose root is
// there, the memory image of checkpoint ck that it resumes from. If the
// image does not reach target, the fork goes without it: its row,
// updated, says that its processes start afresh, and why. The result is
// the row as it now is; an error is the store's.
func (f *forkMemory) send(ctx context.Context, cur sandbox.Sandbox, target, ck, reason string) (sandbox.Sandbox, error) {
	err := f.core.send(ctx, target, cur, node.Transfer{ID: cur.ID, Checkpoint: ck, Memory: true})
	f.crash("fork: memory sent")
	if err == nil {
		return cur, nil
	}
	f.log.Warn("a fork's processes start afresh on another node: its checkpoint's memory image did not reach it", "sandbox", cur.Name, "id", cur.ID, "to", target, "checkpoint", ck, "err", err)
	cur.Reason = movingTo(target) + ": " + reason + " (its processes started afresh: their memory did not reach node " + target + ")"
	if err := f.opts.Store.Sandboxes().Update(ctx, cur); err != nil {
		return cur, f.internal("mark the fork moving without its memory", err)
	}
	return cur, nil
}

// release removes this node's copy of the memory image that fork (a
// sandbox's id), which moved here as mark says, started from (or failed
// to), unless it is still wanted here: by another fork moving here that
// received it, or because its checkpoint's sandbox runs here or is moving
// here. It holds the image's lock (see receiveMemory).
func (f *forkMemory) release(ctx context.Context, fork string, mark moveMark) {
	if mark.memory == "" {
		return
	}
	ctx, cancel := detached(ctx)
	defer cancel()
	unlock := f.locks.lock(memoryImageLock(mark.memory))
	defer unlock()
	if f.unhold(fork, mark.memory) {
		return
	}
	src, err := f.opts.Store.Sandboxes().ByID(ctx, mark.memoryOf)
	switch {
	case err == nil && (f.mine(src) || f.movingHere(src)):
		return // the checkpoint's own image
	case err != nil && !errors.Is(err, store.ErrNotFound):
		f.log.Error("look up a fork's source to remove the copy of its memory image; the next Recover removes it", "checkpoint", mark.memory, "err", err)
		return
	}
	if err := f.opts.Node.DeleteCheckpoint(ctx, mark.memory); err != nil && !errors.Is(err, node.ErrNotFound) {
		f.log.Error("remove the copy of a fork's memory image; the next Recover removes it", "checkpoint", mark.memory, "err", err)
	}
}
