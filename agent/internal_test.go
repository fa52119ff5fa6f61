package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/sandbox"
)

// Internal tests for the parsers and pure helpers that have no exported
// surface of their own.

func TestParseStat(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want proc
		ok   bool
	}{
		{"plain", "42 (sleep) S 1 40 39 0 -1", proc{pid: 42, ppid: 1, pgrp: 40, sid: 39, state: 'S'}, true},
		{"comm with spaces and parens", "7 (a) b (c)) Z 3 7 7 0", proc{pid: 7, ppid: 3, pgrp: 7, sid: 7, state: 'Z'}, true},
		{"truncated", "7 (a) S 3", proc{}, false},
		{"no comm", "7 S 3 4 5", proc{}, false},
		{"bad pid", "x (a) S 1 2 3", proc{}, false},
		{"bad field", "7 (a) S 1 two 3", proc{}, false},
		{"empty", "", proc{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseStat([]byte(tc.in))
			if got != tc.want || ok != tc.ok {
				t.Errorf("parseStat(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("42 (sleep) S 1 40 39 0 -1"))
	f.Add([]byte("1 ()) R 0 0 0"))
	f.Fuzz(func(t *testing.T, b []byte) {
		parseStat(b) // never panics
	})
}

func TestMembers(t *testing.T) {
	procs := []proc{
		{pid: 10, ppid: 1, pgrp: 10, sid: 10},  // the command
		{pid: 11, ppid: 10, pgrp: 10, sid: 10}, // its child
		{pid: 12, ppid: 11, pgrp: 12, sid: 12}, // a grandchild that called setsid
		{pid: 13, ppid: 12, pgrp: 12, sid: 12}, // and its child
		{pid: 14, ppid: 1, pgrp: 14, sid: 10},  // an orphan still in the session
		{pid: 15, ppid: 14, pgrp: 15, sid: 15}, // its child that left
		{pid: 20, ppid: 1, pgrp: 20, sid: 20},  // a stranger
		{pid: 21, ppid: 20, pgrp: 20, sid: 20}, // and its child
		{pid: 1, ppid: 0, pgrp: 1, sid: 1},     // init
	}
	got := members(procs, 10)
	var pids []int
	for pid := range got {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	if want := []int{10, 11, 12, 13, 14, 15}; !slices.Equal(pids, want) {
		t.Errorf("members = %v, want %v", pids, want)
	}
}

func TestParseOOMKill(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\noom_group_kill 0\n", 2, true},
		{"oom_kill_disable 0\nunder_oom 0\noom_kill 17\n", 17, true},
		{"oom_kill_disable 0\n", 0, false},
		{"oom_kill x\n", 0, false},
		{"", 0, false},
	}
	for _, tc := range tests {
		got, ok := parseOOMKill([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseOOMKill(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestMergeEnv(t *testing.T) {
	got := mergeEnv([]string{"A=1", "B=2", "A=3", "bad", "=x", "C=4"}, map[string]string{"B": "b", "Z": "z", "D": "d"})
	want := []string{"A=3", "C=4", "B=b", "D=d", "Z=z"}
	if !slices.Equal(got, want) {
		t.Errorf("mergeEnv = %q, want %q", got, want)
	}
	if v := envValue(got, "B"); v != "b" {
		t.Errorf("envValue(B) = %q, want b", v)
	}
}

func FuzzResolve(f *testing.F) {
	s := NewServer(Options{Home: "/home/sandbox"})
	for _, p := range []string{"a", "/x/../y", "../../..", "a\x00b", "", ".", "//"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got, err := s.resolve(p)
		if err != nil {
			if p != "" && !strings.Contains(p, "\x00") {
				t.Fatalf("resolve(%q) = %v", p, err)
			}
			return
		}
		if !filepath.IsAbs(got) || filepath.Clean(got) != got || strings.Contains(got, "\x00") {
			t.Fatalf("resolve(%q) = %q, want an absolute clean path", p, got)
		}
	})
}

// FuzzFollowLinks builds a directory of symlinks from the input (one
// target per line, links l0, l1, … in a temporary directory, relative
// targets naming each other) and follows the first: it terminates, and
// returns a clean absolute path that is not a symlink, or an error that is
// a *sandbox.Error (ELOOP after maxLinks).
func FuzzFollowLinks(f *testing.F) {
	for _, seed := range []string{
		"l1\nl2\nreal",
		"l0",
		"l1\nl0",
		"../x/../l1\nsub/../../y",
		"/etc/hostname",
		"/\n",
		"l1\n/tmp/../l2\n.",
		"l1\nl2\nl3\nl4\nl5\nl6\nl7\nl8\nl9\nl10\nl11\nl12\nl13\nl14\nl15\nl16\nl17\nl18\nl19\nl20\nl21\nl22\nl23\nl24\nl25\nl26\nl27\nl28\nl29\nl30\nl31\nl32\nl33\nl34\nl35\nl36\nl37\nl38\nl39\nl40\nl41\nend",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if strings.ContainsRune(in, 0) || len(in) > 4096 {
			return // not a symlink target
		}
		dir := t.TempDir()
		for i, target := range strings.Split(in, "\n") {
			if target == "" {
				continue
			}
			if err := os.Symlink(target, filepath.Join(dir, fmt.Sprintf("l%d", i))); err != nil {
				return
			}
		}
		got, err := followLinks(filepath.Join(dir, "l0"))
		if err != nil {
			var e *sandbox.Error
			if !errors.As(err, &e) || !e.Code.Valid() {
				t.Fatalf("followLinks error %v is not a *sandbox.Error", err)
			}
			return
		}
		if !filepath.IsAbs(got) || filepath.Clean(got) != got {
			t.Fatalf("followLinks = %q, want an absolute clean path", got)
		}
		if fi, err := os.Lstat(got); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			t.Fatalf("followLinks = %q, which is still a symlink", got)
		}
	})
}

// TestFsErrorErrnos: every errno a file operation can return for what the
// caller or the sandbox did is a *sandbox.Error with a code other than
// internal, naming the errno; only the agent's own bugs are internal.
func TestFsErrorErrnos(t *testing.T) {
	mapped := []syscall.Errno{
		syscall.ENOENT, syscall.EEXIST, syscall.EACCES, syscall.EPERM, syscall.EROFS, syscall.ENOTDIR,
		syscall.EISDIR, syscall.ENOTEMPTY, syscall.ELOOP, syscall.ENAMETOOLONG, syscall.EXDEV, syscall.EINVAL,
		syscall.EBUSY, syscall.ENOSPC, syscall.EDQUOT, syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM,
		syscall.ENXIO, syscall.ENODEV, syscall.EMLINK, syscall.EFBIG, syscall.EOVERFLOW, syscall.EOPNOTSUPP,
		syscall.ENOTSUP, syscall.ETXTBSY, syscall.EAGAIN, syscall.EWOULDBLOCK, syscall.EINTR, syscall.ESTALE,
		syscall.EIO,
	}
	for _, errno := range mapped {
		err := fsError(&fs.PathError{Op: "open", Path: "/p", Err: errno}, "/p")
		var e *sandbox.Error
		if !errors.As(err, &e) || e.Code == sandbox.CodeInternal || e.Details["errno"] != unix.ErrnoName(errno) {
			t.Errorf("fsError(%s) = %v (%+v), want a sandbox.Error with a code and errno %s", unix.ErrnoName(errno), err, e, unix.ErrnoName(errno))
		}
	}
	for _, errno := range []syscall.Errno{syscall.EBADF, syscall.EFAULT} {
		if code := sandbox.ErrorCode(fsError(errno, "/p")); code != sandbox.CodeInternal {
			t.Errorf("fsError(%s) has code %s, want internal", unix.ErrnoName(errno), code)
		}
	}
}

// FuzzReceiveSecrets feeds the secret frames that follow an exec request
// (the first byte says how many are announced, the rest is the stream):
// receiveSecrets never panics, and what it accepts is what a command's
// environment can hold, each name once.
func FuzzReceiveSecrets(f *testing.F) {
	frame := func(kind FrameKind, payload string) string {
		var b bytes.Buffer
		WriteFrame(&b, kind, []byte(payload))
		return b.String()
	}
	for _, seed := range []string{
		"\x01" + frame(FrameSecret, "K=value"),
		"\x02" + frame(FrameSecret, "K=v1") + frame(FrameSecret, "L=v=2"),
		"\x02" + frame(FrameSecret, "K=v1") + frame(FrameSecret, "K=v2"),
		"\x01" + frame(FrameSecret, "K"),
		"\x01" + frame(FrameSecret, "1K=v"),
		"\x01" + frame(FrameSecret, "K=a\x00b"),
		"\x01" + frame(FrameData, "K=v"),
		"\x02" + frame(FrameSecret, "K=v"),
		"\x01" + frame(FrameSecret, "K=")[:6],
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		vars, err := receiveSecrets(bytes.NewReader(in[1:]), int(in[0]%8))
		if err != nil {
			var e *sandbox.Error
			if !errors.Is(err, errBroken) && (!errors.As(err, &e) || !e.Code.Valid()) {
				t.Fatalf("receiveSecrets error %v is neither a broken stream nor a *sandbox.Error", err)
			}
			return
		}
		if len(vars) != int(in[0]%8) {
			t.Fatalf("receiveSecrets returned %d secrets, %d announced", len(vars), in[0]%8)
		}
		seen := map[string]bool{}
		for _, v := range vars {
			if sandbox.ValidateSecretName(v.name) != nil || bytes.IndexByte(v.value(), 0) >= 0 || seen[v.name] ||
				string(v.entry[:len(v.name)+1]) != v.name+"=" {
				t.Fatalf("receiveSecrets accepted %q as %q", v.entry, v.name)
			}
			seen[v.name] = true
		}
		env := withSecretPlaceholders([]string{"A=1", "K=plain"}, vars)
		for _, v := range vars {
			if env[v.index] != v.name+"="+strings.Repeat(secretPlaceholder, len(v.value())) {
				t.Fatalf("placeholder of %s at %d is %q", v.name, v.index, env[v.index])
			}
		}
	})
}
