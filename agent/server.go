package agent

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"

	"github.com/hearth/hearth/sandbox"
)

// Options configure a Server. The zero value runs commands as the agent's
// own user with no extra limits.
type Options struct {
	// UID and GID are the sandbox user's ids: commands run as this user and
	// files written through the agent belong to it.
	UID, GID int
	// Home is the sandbox user's home and the default working directory.
	Home string
	// Env is the default environment of every command ("K=V"), under the
	// request's own env.
	Env []string
	// NProc, when positive, is the RLIMIT_NPROC of every command: under
	// gVisor it keeps a fork bomb from reaching the host's pids limit and
	// killing the whole sandbox.
	NProc uint64
	// AddressSpace, when positive, is the RLIMIT_AS of every command: under
	// gVisor, whose memory cgroup only reports, it is the memory limit.
	AddressSpace uint64
	// Logger receives the agent's own log; nil discards.
	Logger *slog.Logger
}

// Server serves the agent protocol inside a sandbox.
type Server struct {
	opts Options
	log  *slog.Logger
	wg   sync.WaitGroup
}

// NewServer returns a server with the given options.
func NewServer(opts Options) *Server {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{opts: opts, log: log}
}

// Serve accepts connections on ln, one operation each, until ln is closed.
// It returns nil when ln was closed, and the accept error otherwise.
func (s *Server) Serve(ln net.Listener) error {
	for {
		conn, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				s.wg.Wait()
				return nil
			}
			return err
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer conn.Close()
			s.handle(conn)
		}()
	}
}

// handle reads the request frame and runs the op. Every path ends the
// connection with exactly one FrameResult or FrameError, unless the
// connection itself broke.
func (s *Server) handle(conn net.Conn) {
	kind, payload, err := ReadFrame(conn, nil)
	if err != nil {
		return
	}
	if kind != FrameRequest {
		s.fail(conn, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: first frame must be a request, got %q", kind))
		return
	}
	req, err := DecodeRequest(payload)
	if err != nil {
		s.fail(conn, err)
		return
	}
	switch req.Op {
	case OpPing:
		WriteJSON(conn, FrameResult, PingResult{Version: ProtocolVersion, PID: os.Getpid()})
	default:
		s.fail(conn, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: unknown op %q", req.Op))
	}
}

// fail sends err as the final FrameError.
func (s *Server) fail(conn net.Conn, err error) {
	WriteJSON(conn, FrameError, sandbox.AsError(err))
}
