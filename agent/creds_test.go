package agent

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/hearth/hearth/testutil/testenv"
)

// threadStatus returns the Uid, Gid and CapEff lines of /proc/thread-self
// or of another task's status.
func threadStatus(t *testing.T, status string) (uid, gid, capEff string) {
	t.Helper()
	b, err := os.ReadFile(status)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch k {
		case "Uid":
			uid = strings.Join(strings.Fields(v), " ")
		case "Gid":
			gid = strings.Join(strings.Fields(v), " ")
		case "CapEff":
			capEff = strings.TrimSpace(v)
		}
	}
	return uid, gid, capEff
}

// wantAllRoot fails t unless every thread of this process has root's ids.
func wantAllRoot(t *testing.T) {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(tasks) == 0 {
		t.Fatalf("threads: %v, %v", tasks, err)
	}
	for _, st := range tasks {
		if uid, gid, _ := threadStatus(t, st); uid != "0 0 0 0" || gid != "0 0 0 0" {
			t.Errorf("thread %s has uid %q gid %q, want root's", st, uid, gid)
		}
	}
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root: the agent switches a thread's ids")
	}
}

// TestAsUser: op runs with the user's effective ids and no effective
// capabilities, real and saved ids root's; afterwards the thread is root
// again with its capabilities.
func TestAsUser(t *testing.T) {
	needRoot(t)
	s := NewServer(Options{UID: 1000, GID: 1000})
	if !s.switches {
		t.Fatalf("a root agent with user 1000 does not switch: %+v %+v", s.self, s.user)
	}
	_, _, capsBefore := threadStatus(t, "/proc/thread-self/status")
	var uid, gid, caps string
	var groups []int
	if err := s.asUser(func() {
		uid, gid, caps = threadStatus(t, "/proc/thread-self/status")
		groups, _ = syscall.Getgroups()
	}); err != nil {
		t.Fatal(err)
	}
	if uid != "0 1000 0 1000" || gid != "0 1000 0 1000" {
		t.Errorf("in op: uid %q gid %q, want real 0, effective 1000, saved 0, fs 1000", uid, gid)
	}
	if caps != "0000000000000000" {
		t.Errorf("in op: effective capabilities %s, want none", caps)
	}
	if len(groups) != 0 {
		t.Errorf("in op: supplementary groups %v, want none", groups)
	}
	wantAllRoot(t)
	if _, _, caps := threadStatus(t, "/proc/thread-self/status"); caps != capsBefore {
		t.Errorf("after op: effective capabilities %s, want %s again", caps, capsBefore)
	}
}

// TestAsUserNewThreads: threads the runtime creates while a goroutine is
// switched (here: from the switched thread itself, for goroutines it
// starts that block in system calls) are root's, and goroutines that run
// meanwhile never see the user's ids.
func TestAsUserNewThreads(t *testing.T) {
	needRoot(t)
	s := NewServer(Options{UID: 1000, GID: 1000})
	stop := make(chan struct{})
	var watchers sync.WaitGroup
	var saw atomic.Bool
	for range 4 {
		watchers.Add(1)
		go func() {
			defer watchers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if syscall.Geteuid() != 0 {
					saw.Store(true)
				}
			}
		}()
	}
	var blocked sync.WaitGroup
	var pipes []*os.File
	for range 8 {
		var fail error
		if err := s.asUser(func() {
			if syscall.Geteuid() != 1000 {
				fail = syscall.EPERM
			}
			// Goroutines that block in read(2) each hold a thread: the
			// runtime starts new ones, some from this locked thread.
			for range 4 {
				r, w, err := os.Pipe()
				if err != nil {
					fail = err
					return
				}
				pipes = append(pipes, r, w)
				fd := int(r.Fd())
				blocked.Add(1)
				go func() {
					defer blocked.Done()
					var b [1]byte
					syscall.Read(fd, b[:]) // until the write end closes
				}()
			}
		}); err != nil || fail != nil {
			t.Fatalf("asUser = %v, in op: %v", err, fail)
		}
	}
	close(stop)
	watchers.Wait()
	wantAllRoot(t)
	for i := 1; i < len(pipes); i += 2 {
		pipes[i].Close()
	}
	blocked.Wait()
	for i := 0; i < len(pipes); i += 2 {
		pipes[i].Close()
	}
	if saw.Load() {
		t.Errorf("a goroutine outside asUser saw an effective uid other than 0")
	}
}

// TestUserIDs: only a root agent switches, and only to another user.
func TestUserIDs(t *testing.T) {
	needRoot(t)
	if _, _, sw := userIDs(Options{UID: 0, GID: 0}); sw {
		t.Errorf("a root agent with a root user switches")
	}
	if self, user, sw := userIDs(Options{UID: 1000, GID: 1000}); !sw || user.uid != 1000 || user.gid != 1000 || len(user.groups) != 0 || self.uid != 0 {
		t.Errorf("userIDs(1000) = %+v, %+v, %v", self, user, sw)
	}
}
