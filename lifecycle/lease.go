package lifecycle

import (
	"sync"
	"time"
)

// leases track, per sandbox id, when its owner last called it and how many
// of its commands are running: the idle clock that puts a sandbox to sleep.
// Only the owner's calls renew it (exec, files, checkpoint, restore, wake),
// never traffic inside the sandbox nor reads such as get and list, so a
// dashboard polling the list keeps nothing awake. They live in memory: a
// daemon restart gives every adopted sandbox a fresh idle window.
type leases struct {
	mu sync.Mutex
	m  map[string]*lease
}

type lease struct {
	last time.Time
	busy int
	// calls counts calls and command starts and ends, so that a watcher
	// can tell activity apart from silence without the clock (activity).
	calls uint64
}

func (l *leases) get(id string) *lease {
	if l.m == nil {
		l.m = map[string]*lease{}
	}
	e := l.m[id]
	if e == nil {
		e = &lease{}
		l.m[id] = e
	}
	return e
}

// touch renews id's idle clock.
func (l *leases) touch(id string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.get(id)
	e.last = now
	e.calls++
}

// begin marks a command of id running until the returned func is called,
// which renews the clock again: a sandbox never sleeps under a command.
func (l *leases) begin(id string, now func() time.Time) (end func()) {
	l.mu.Lock()
	e := l.get(id)
	e.busy++
	e.calls++
	e.last = now()
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		e.busy--
		e.calls++
		e.last = now()
	}
}

// idle reports whether id has run no command and had no call for at least
// d before now. A sandbox the daemon has not seen yet starts its window now.
func (l *leases) idle(id string, now time.Time, d time.Duration) bool {
	since, ok := l.idleSince(id, now)
	return ok && now.Sub(since) >= d
}

// idleSince returns when id last had a call or a command, and false while
// one of its commands runs. A sandbox the daemon has not seen yet starts
// its window now.
func (l *leases) idleSince(id string, now time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.get(id)
	if e.last.IsZero() {
		e.last = now
	}
	return e.last, e.busy == 0
}

// forget drops id's lease once the sandbox is gone.
func (l *leases) forget(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, id)
}

// running returns how many of id's commands are running.
func (l *leases) running(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.get(id).busy
}

// activity returns how many of id's commands are running and a count that
// changes with every call and every command's start and end; a sandbox the
// leases do not know has neither.
func (l *leases) activity(id string) (busy int, calls uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.m[id]; e != nil {
		return e.busy, e.calls
	}
	return 0, 0
}
