package agent

import (
	"bufio"
	"bytes"
	"strconv"

	"github.com/hearth/hearth/internal/kernfile"
)

// The files that hold the sandbox's memory cgroup OOM kill counter as the
// sandbox sees its own cgroup, both with an "oom_kill N" line. Under gVisor
// neither exists: the memory guard's kills count instead (Options.Memory).
const (
	oomEventsV2  = "/sys/fs/cgroup/memory.events"
	oomControlV1 = "/sys/fs/cgroup/memory/memory.oom_control"
)

// oomKills returns the sandbox's OOM kill count, and false when no counter
// is readable.
func (s *Server) oomKills() (uint64, bool) {
	if s.guard != nil {
		return s.guard.kills.Load(), true
	}
	for _, f := range []string{oomEventsV2, oomControlV1} {
		b, err := kernfile.Read(f)
		if err != nil {
			continue
		}
		if n, ok := parseOOMKill(b); ok {
			return n, true
		}
	}
	return 0, false
}

// parseOOMKill finds the "oom_kill N" line of memory.events or
// memory.oom_control.
func parseOOMKill(b []byte) (uint64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := bytes.Cut(sc.Bytes(), []byte{' '})
		if !ok || string(k) != "oom_kill" {
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
		return n, err == nil
	}
	return 0, false
}
