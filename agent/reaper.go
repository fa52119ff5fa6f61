package agent

import (
	"errors"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// reaper is the one waiter for every child of the process, for an agent
// that is PID 1: orphans anywhere in the sandbox are reparented to it and
// must be waited for, but wait4(-1) would also take the statuses that
// os.Process.Wait expects. So with a reaper nothing else waits: on SIGCHLD
// it calls wait4(-1, WNOHANG) until no child is left to reap, hands each
// status to the command that registered its pid and drops the others.
//
// A child can exit before its starter learns its pid. start therefore forks
// under the same lock that reap takes, so a pid is always registered
// before its status can be collected.
type reaper struct {
	sig  chan os.Signal
	done chan struct{}

	mu      sync.Mutex
	waiting map[int]chan syscall.WaitStatus
}

func newReaper() *reaper {
	r := &reaper{
		sig:     make(chan os.Signal, 1),
		done:    make(chan struct{}),
		waiting: map[int]chan syscall.WaitStatus{},
	}
	signal.Notify(r.sig, syscall.SIGCHLD)
	go r.loop()
	r.sig <- syscall.SIGCHLD // children that exited before Notify
	return r
}

func (r *reaper) loop() {
	for {
		select {
		case <-r.sig:
			r.reap()
		case <-r.done:
			return
		}
	}
}

// stop ends the reaping; children that exit later stay zombies.
func (r *reaper) stop() {
	signal.Stop(r.sig)
	close(r.done)
}

// reap collects every child that has exited.
func (r *reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return // ECHILD: no children; 0: none has exited
		}
		if ch, ok := r.waiting[pid]; ok {
			delete(r.waiting, pid)
			ch <- ws // buffered
		}
	}
}

// start runs fork, which starts one child and returns it (and its final
// status if it has already collected it), and registers the child so that
// wait returns its status.
func (r *reaper) start(fork func() (*os.Process, *syscall.WaitStatus, error)) (*os.Process, <-chan syscall.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ended, err := fork()
	if err != nil {
		return nil, nil, err
	}
	ch := make(chan syscall.WaitStatus, 1)
	if ended != nil {
		ch <- *ended
	} else {
		r.waiting[p.Pid] = ch
	}
	return p, ch, nil
}
