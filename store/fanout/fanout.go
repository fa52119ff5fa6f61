// Package fanout hands a store's change notices (store.Changes) to the
// listeners in one process. Each listener has its own queue drained by its
// own goroutine, so a slow listener delays no other and no sender; one
// that falls more than maxQueue notices behind has them replaced by one
// "" ("anything may have changed"), which the store's contract allows.
package fanout

import (
	"context"
	"errors"
	"sync"
)

// maxQueue is how many notices a listener may have waiting before they
// are folded into one "".
const maxQueue = 256

// ErrClosed is returned by Subscribe after Close.
var ErrClosed = errors.New("fanout: closed")

// Hub delivers notices to subscribers by topic. The zero Hub is ready.
type Hub struct {
	mu     sync.Mutex
	subs   map[string]map[*listener]struct{}
	closed bool
	done   chan struct{} // closed by Close; made lazily under mu
}

// listener is one Subscribe: its queue and the channel it feeds.
type listener struct {
	out   chan string
	wake  chan struct{} // one slot: the queue has something
	mu    sync.Mutex
	queue []string
}

// Subscribe returns a channel of topic's notices published from now on,
// closed when ctx is done or the hub is closed.
func (h *Hub) Subscribe(ctx context.Context, topic string) (<-chan string, error) {
	l := &listener{out: make(chan string), wake: make(chan struct{}, 1)}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	if h.subs == nil {
		h.subs = map[string]map[*listener]struct{}{}
	}
	if h.subs[topic] == nil {
		h.subs[topic] = map[*listener]struct{}{}
	}
	h.subs[topic][l] = struct{}{}
	done := h.doneLocked()
	h.mu.Unlock()
	go func() {
		defer close(l.out)
		defer h.remove(topic, l)
		l.run(ctx, done)
	}()
	return l.out, nil
}

// Publish queues payload for every subscriber of topic.
func (h *Hub) Publish(topic, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for l := range h.subs[topic] {
		l.push(payload)
	}
}

// PublishAll queues payload for every subscriber of every topic: "" after
// the notices' source was lost for a while.
func (h *Hub) PublishAll(payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ls := range h.subs {
		for l := range ls {
			l.push(payload)
		}
	}
}

// Topics returns the topics that have subscribers.
func (h *Hub) Topics() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for t, ls := range h.subs {
		if len(ls) > 0 {
			out = append(out, t)
		}
	}
	return out
}

// Close closes every subscriber's channel (once it has been drained of
// nothing more) and refuses new ones. Closing twice does nothing.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.doneLocked())
	}
}

func (h *Hub) doneLocked() chan struct{} {
	if h.done == nil {
		h.done = make(chan struct{})
	}
	return h.done
}

func (h *Hub) remove(topic string, l *listener) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs[topic], l)
	if len(h.subs[topic]) == 0 {
		delete(h.subs, topic)
	}
}

// push queues payload, folding an overlong queue into one "" before it.
func (l *listener) push(payload string) {
	l.mu.Lock()
	if len(l.queue) >= maxQueue {
		l.queue = append(l.queue[:0], "", payload)
	} else {
		l.queue = append(l.queue, payload)
	}
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// run feeds l.out from l's queue until ctx or done ends.
func (l *listener) run(ctx context.Context, done <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case <-l.wake:
		}
		for {
			l.mu.Lock()
			if len(l.queue) == 0 {
				l.mu.Unlock()
				break
			}
			next := l.queue[0]
			l.queue = l.queue[1:]
			l.mu.Unlock()
			select {
			case l.out <- next:
			case <-ctx.Done():
				return
			case <-done:
				return
			}
		}
	}
}
