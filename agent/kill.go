package agent

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
)

// killPatience bounds killTree: a process in uninterruptible sleep cannot
// die at once, and the caller must get an answer.
const killPatience = 5 * time.Second

// proc is one process as /proc/<pid>/stat shows it.
type proc struct {
	pid, ppid, pgrp, sid int
	state                byte // R, S, D, Z, T, …
}

// parseStat parses the start of /proc/<pid>/stat: "pid (comm) state ppid
// pgrp session …". comm may hold spaces and parentheses, so the fields are
// taken after its last ')'.
func parseStat(b []byte) (proc, bool) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open <= 0 || end < open {
		return proc{}, false
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return proc{}, false
	}
	f := bytes.Fields(b[end+1:])
	if len(f) < 4 || len(f[0]) != 1 {
		return proc{}, false
	}
	p := proc{pid: pid, state: f[0][0]}
	for i, dst := range []*int{&p.ppid, &p.pgrp, &p.sid} {
		v, err := strconv.Atoi(string(f[i+1]))
		if err != nil {
			return proc{}, false
		}
		*dst = v
	}
	return p, true
}

// scanProcs reads every process; zombies (state Z or X) are included only
// with zombies set: they are dead, and only waiting removes them.
func scanProcs(zombies bool) []proc {
	var out []proc
	eachProcFile("/proc", "stat", func(_ int, b []byte) {
		if p, ok := parseStat(b); ok && (zombies || p.state != 'Z' && p.state != 'X') {
			out = append(out, p)
		}
	})
	return out
}

// members returns the processes that belong to the command started as root
// (with Setsid, so its session and process group ids are root): its
// session, its process group, and every descendant of any of them,
// including those that left with setsid. A descendant whose parent already
// died was reparented to PID 1 (or a subreaper) and is found only if it
// stayed in the session; nothing but a cgroup could find it otherwise.
func members(procs []proc, root int) map[int]bool {
	self := os.Getpid()
	in := map[int]bool{}
	children := map[int][]int{}
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p.pid)
		if p.pid == root || p.sid == root || p.pgrp == root {
			in[p.pid] = true
		}
	}
	queue := make([]int, 0, len(in))
	for pid := range in {
		queue = append(queue, pid)
	}
	for len(queue) > 0 {
		pid := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		for _, c := range children[pid] {
			if !in[c] {
				in[c] = true
				queue = append(queue, c)
			}
		}
	}
	delete(in, self)
	delete(in, 1)
	return in
}

// killTree kills every member of the command started as root and returns
// when none is left alive, or after killPatience.
//
// Killing a tree races with the tree forking and with children being
// reparented as their parents die. So it first freezes: SIGSTOP to every
// member found, and rescans until a scan finds no new member (a stopped
// process cannot fork, and while nothing dies, parent links stay intact).
// Then SIGKILL to all, and again until a scan finds none alive. Last it
// waits, within the same patience, until the dead are reaped too: a zombie
// still counts against the user's RLIMIT_NPROC, so returning earlier would
// let the next command fail to fork (seen under gVisor after a fork bomb).
func killTree(root int) {
	deadline := time.Now().Add(killPatience)
	delay := time.Millisecond
	for {
		syscall.Kill(-root, syscall.SIGSTOP)
		seen := map[int]bool{}
		for range 20 {
			fresh := 0
			for pid := range members(scanProcs(false), root) {
				if !seen[pid] {
					seen[pid] = true
					syscall.Kill(pid, syscall.SIGSTOP)
					fresh++
				}
			}
			if fresh == 0 {
				break
			}
		}
		if len(seen) == 0 {
			waitReaped(root, deadline)
			return
		}
		syscall.Kill(-root, syscall.SIGKILL)
		for pid := range seen {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(delay)
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// waitReaped returns once no process of the command started as root is
// left, zombies included, or at deadline.
func waitReaped(root int, deadline time.Time) {
	for delay := time.Millisecond; len(members(scanProcs(true), root)) > 0 && time.Now().Before(deadline); delay = min(2*delay, 50*time.Millisecond) {
		time.Sleep(delay)
	}
}
