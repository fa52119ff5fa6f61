package agent

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// Options configure a Server. The zero value serves an agent that runs as
// root: commands run as root with no extra limits, relative paths resolve
// against "/".
type Options struct {
	// UID and GID are the sandbox user's ids: commands and file
	// operations run as this user (with no supplementary groups), so files
	// and directories created through the agent belong to it. A root agent
	// switches to them for each file operation (see asUser); one that is
	// not root does file operations with its own ids.
	UID, GID int
	// Home is the sandbox user's home: the default working directory and the
	// base of relative paths. Empty means "/"; a relative home is taken
	// from "/".
	Home string
	// WorkDir is the default working directory and the base of relative
	// paths instead of Home (an image's working directory); empty means
	// Home.
	WorkDir string
	// Env is the default environment of every command ("K=V"), under the
	// request's own env.
	Env []string
	// NProc, when positive, is the RLIMIT_NPROC of every command: under
	// gVisor it keeps a fork bomb from reaching the host's pids limit and
	// killing the whole sandbox. It is set while the command is stopped at
	// its exec under ptrace (see limits.go), so it holds from the program's
	// first instruction and never applies to the agent.
	NProc uint64
	// Memory, when positive, is the sandbox's memory limit in bytes, which
	// the agent enforces itself: past it, it kills the process with the
	// largest resident set (see memguard.go). Only for PID 1 of a gVisor
	// sandbox, whose memory cgroup only reports: the guard reads
	// /proc/meminfo and may kill any process it sees.
	Memory uint64
	// ReapOrphans makes the server the reaper of every child of this
	// process: it waits for any child on SIGCHLD, hands the statuses of its
	// commands to them and discards the others. Set it when the agent is PID
	// 1 (orphaned processes are reparented to it and would stay zombies);
	// leave it off when the server shares its process with other code that
	// waits for its own children, such as tests.
	ReapOrphans bool
	// Logger receives the agent's own log; nil discards.
	Logger *slog.Logger
}

// requestTimeout bounds how long a new connection may take to send its
// request frame.
const requestTimeout = 30 * time.Second

// acceptDrain is how long Quiesce still accepts on a listener before it
// closes it. The host makes no new connection once it has asked for quiet
// (see QuiesceSignal), and the signal reaches the agent well after the
// ask, so what is queued then was connected before and is accepted at
// once; the drain's end is what the wait for a connection that is not
// there costs.
const acceptDrain = 5 * time.Millisecond

// Server serves the agent protocol inside a sandbox.
type Server struct {
	opts   Options
	log    *slog.Logger
	reaper *reaper   // nil unless Options.ReapOrphans
	guard  *memGuard // nil unless Options.Memory
	// self and user are the agent's ids and the sandbox user's; switches
	// says file operations take the user's (see asUser).
	self, user ids
	switches   bool

	mu      sync.Mutex
	closing bool
	// listeners are the listeners Serve accepts on, each with a channel
	// closed once its accept loop has ended: every connection it accepted
	// is in conns by then.
	listeners map[net.Listener]chan struct{}
	// quiescing: Quiesce is draining the listeners (see acceptDrain).
	quiescing bool
	conns     map[net.Conn]struct{}
	execs     map[*execution]struct{}
	wg        sync.WaitGroup // one per connection being handled
}

// NewServer returns a server with the given options. With ReapOrphans it
// starts reaping children at once, until Shutdown.
func NewServer(opts Options) *Server {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts.Home = filepath.Join("/", opts.Home)
	if opts.WorkDir == "" {
		opts.WorkDir = opts.Home
	}
	opts.WorkDir = filepath.Join("/", opts.WorkDir)
	s := &Server{
		opts:      opts,
		log:       log,
		listeners: map[net.Listener]chan struct{}{},
		conns:     map[net.Conn]struct{}{},
		execs:     map[*execution]struct{}{},
	}
	s.self, s.user, s.switches = userIDs(opts)
	if opts.ReapOrphans {
		s.reaper = newReaper()
	}
	if opts.Memory > 0 {
		s.guard = newMemGuard(opts.Memory, "/proc", log)
		go s.guard.run()
	}
	return s
}

// Serve accepts connections on ln, one operation each, until ln is closed
// (by the caller or by Shutdown). It then waits for the operations in
// flight and returns nil; any other accept error is returned as is.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	accepting := make(chan struct{})
	s.listeners[ln] = accepting
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()
	for {
		conn, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			drained := s.quiescing && isTimeout(err)
			s.mu.Unlock()
			if drained {
				ln.Close()
			}
			close(accepting)
			if !drained && !errors.Is(err, net.ErrClosed) {
				return err
			}
			s.wg.Wait()
			return nil
		}
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			conn.Close()
			continue
		}
		s.conns[conn] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.conns, conn)
				s.mu.Unlock()
				conn.Close()
			}()
			s.handle(conn)
		}()
	}
}

// Shutdown stops the server: it closes the listeners, sends SIGTERM to the
// process group of every running command and waits for the operations in
// flight. When ctx ends first it closes the remaining connections (a write
// in progress keeps nothing), kills the commands' process trees and waits
// for the handlers to return; it then returns ctx's error. A ctx that has
// already ended gives no grace: no SIGTERM, which a command could end on
// and report before its connection closed, so every caller of a running
// command sees its connection break.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	for ln := range s.listeners {
		ln.Close()
	}
	execs := s.runningLocked()
	s.mu.Unlock()
	if ctx.Err() == nil {
		for _, e := range execs {
			e.signalGroup(syscall.SIGTERM)
		}
	}

	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		s.mu.Lock()
		execs = s.runningLocked()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		for _, e := range execs {
			e.kill()
		}
		<-done
	}
	if s.guard != nil {
		s.guard.close()
	}
	if s.reaper != nil {
		s.reaper.stop()
	}
	return err
}

// Quiesce closes the listeners, waits until the operations in flight end
// or ctx does, then closes the connections left, but leaves the server
// open and its commands running: a Serve on a new listener serves again.
// A listener is not closed at once: for acceptDrain it still accepts,
// so that a connection the host made before it asked for quiet is served
// rather than reset in the listener's queue.
// It is what a memory checkpoint needs, which cannot save a connection to
// the host. An operation still open when ctx ends ends as if its caller
// went away (a command keeps running for its grace period); the Serve
// calls of the closed listeners return once their operations have.
func (s *Server) Quiesce(ctx context.Context) {
	s.mu.Lock()
	s.quiescing = true
	loops := make([]chan struct{}, 0, len(s.listeners))
	for ln, accepting := range s.listeners {
		if d, ok := ln.(interface{ SetDeadline(time.Time) error }); !ok || d.SetDeadline(time.Now().Add(acceptDrain)) != nil {
			ln.Close()
		}
		loops = append(loops, accepting)
	}
	s.mu.Unlock()
	// Every connection accepted is counted once its loop has ended.
	for _, accepting := range loops {
		select {
		case <-accepting:
		case <-ctx.Done():
		}
	}
	s.mu.Lock()
	s.quiescing = false
	s.mu.Unlock()
	for {
		s.mu.Lock()
		n := len(s.conns)
		s.mu.Unlock()
		if n == 0 || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Millisecond):
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.Close()
	}
}

func (s *Server) runningLocked() []*execution {
	out := make([]*execution, 0, len(s.execs))
	for e := range s.execs {
		out = append(out, e)
	}
	return out
}

// handle reads the request frame and runs the op. Every path ends the
// connection with exactly one FrameResult or FrameError, unless the
// connection itself broke; after connect's FrameResult the connection is a
// raw stream.
func (s *Server) handle(conn net.Conn) {
	conn.SetReadDeadline(time.Now().Add(requestTimeout))
	kind, payload, err := ReadFrame(conn, nil)
	if err != nil {
		return
	}
	conn.SetReadDeadline(time.Time{})
	if kind != FrameRequest {
		s.fail(conn, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: first frame must be a request, got %q", kind))
		return
	}
	req, err := DecodeRequest(payload)
	if err != nil {
		s.fail(conn, err)
		return
	}
	log := s.log.With("op", string(req.Op))
	switch req.Op {
	case OpPing:
		WriteJSON(conn, FrameResult, PingResult{Version: ProtocolVersion, PID: os.Getpid()})
	case OpExec:
		s.exec(conn, req, log)
	case OpRead, OpWrite, OpList, OpStat, OpMkdir, OpRemove, OpRename, OpChmod:
		s.fileOp(conn, req, log)
	case OpConnect:
		s.connect(conn, req.Port, log.With("port", req.Port))
	case OpPorts:
		s.answer(conn, log, func() (any, error) {
			ports, err := listeningPorts("/proc/net")
			return PortsResult{Ports: ports}, err
		})
	default:
		s.fail(conn, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: unknown op %q", req.Op))
	}
}

// fileOp runs a file operation with the sandbox user's ids (see asUser):
// the kernel checks every path and every change as the user's. A read or
// a write takes them for what touches the file system only (see readFile
// and writeFile), the others for all they do.
func (s *Server) fileOp(conn net.Conn, req Request, log *slog.Logger) {
	switch req.Op {
	case OpRead:
		s.readFile(conn, req.Path, log)
		return
	case OpWrite:
		s.writeFile(conn, *req.Write, log)
		return
	}
	err := s.asUser(func() {
		switch req.Op {
		case OpList:
			s.list(conn, req.Path, log)
		case OpStat:
			s.answer(conn, log, func() (any, error) { return s.stat(req.Path) })
		case OpMkdir:
			s.answer(conn, log, func() (any, error) { return s.mkdir(req.Path) })
		case OpRemove:
			s.answer(conn, log, func() (any, error) { return struct{}{}, s.remove(req.Path, req.Recursive) })
		case OpRename:
			s.answer(conn, log, func() (any, error) { return s.rename(req.Path, req.To) })
		case OpChmod:
			s.answer(conn, log, func() (any, error) { return s.chmod(req.Path, req.Mode) })
		}
	})
	if err != nil {
		s.failLogged(conn, log, err)
	}
}

// answer runs an op whose only output is its final frame.
func (s *Server) answer(conn net.Conn, log *slog.Logger, op func() (any, error)) {
	v, err := op()
	if err != nil {
		s.failLogged(conn, log, err)
		return
	}
	WriteJSON(conn, FrameResult, v)
}

// fail sends err as the final FrameError. An error that becomes internal
// carries its cause in the details (causeDetail) for the daemon, which
// logs it and strips it (see Client): the caller sees "internal error".
func (s *Server) fail(conn net.Conn, err error) {
	e := sandbox.AsError(err)
	var se *sandbox.Error
	if !errors.As(err, &se) {
		e.With(causeDetail, err.Error())
	}
	WriteJSON(conn, FrameError, e)
}

// failLogged sends err as the final FrameError and logs the cause of the
// errors that become internal in the sandbox's log too.
func (s *Server) failLogged(conn net.Conn, log *slog.Logger, err error) {
	if sandbox.ErrorCode(err) == sandbox.CodeInternal {
		log.Error("operation failed", "err", err)
	}
	s.fail(conn, err)
}
