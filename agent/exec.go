package agent

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/sandbox"
)

const (
	// outputChunk is the largest read from a command's stdout or stderr,
	// the pipe's default capacity; each read is sent as one frame at once.
	outputChunk = 64 << 10
	// drainIdle is how long, once the command has exited (or was killed),
	// its output pipes may stay silent before the result is sent anyway: a
	// background process it left (or one that escaped the kill) holds them
	// open. That process keeps running; its output is read and dropped so
	// that it never gets SIGPIPE.
	drainIdle = 200 * time.Millisecond
	// drainCap bounds the whole drain after exit, against a background
	// process that keeps writing.
	drainCap = 5 * time.Second
	// stdinPoll is how often a write to a command's stdin that does not
	// progress checks whether the caller hung up.
	stdinPoll = 250 * time.Millisecond
)

// execution is one running command.
type execution struct {
	pid    int
	grace  time.Duration
	tty    *os.File // the terminal's master, or nil
	log    *slog.Logger
	out    frameWriter
	exited chan struct{} // closed when the command's status is known
	killed chan struct{} // closed when a started kill has finished

	mu       sync.Mutex
	done     bool // exited is closed
	timedOut bool
	gone     bool // the caller went away
	killing  bool
	graceT   *time.Timer
}

// exec runs one command and streams it (see OpExec): stdout and stderr (or
// its terminal's output) as they come, stdin frames to its stdin (or
// terminal), controls as they come, then the result, only once the command
// has exited and its output is drained. At req.Timeout the whole process
// tree is killed and the result says timed_out; when the caller goes away
// the command runs on for req.Grace, unheard, and then is killed.
func (s *Server) exec(conn net.Conn, r Request, log *slog.Logger) {
	req := *r.Exec
	secrets, script, err := receiveInputs(conn, r)
	if err != nil {
		if !errors.Is(err, errBroken) {
			s.failLogged(conn, log, err)
		}
		return
	}
	c, err := s.command(req, script, secrets)
	if err != nil {
		s.failLogged(conn, log, err)
		return
	}
	defer c.close()

	var st *stdio
	if req.TTY != nil {
		st, err = terminal(*req.TTY, req.Stdin, s.opts.UID)
	} else {
		st, err = pipes(req.Stdin)
	}
	if err != nil {
		s.failLogged(conn, log, err)
		return
	}

	oomBefore, oomKnown := s.oomKills()
	started := time.Now()
	p, wait, err := s.start(c, st.child, st.tty != nil)
	st.closeChild()
	c.close()
	if err != nil {
		st.closeOwn()
		s.failLogged(conn, log, err)
		return
	}
	defer p.Release()
	log = log.With("pid", p.Pid)

	e := newExecution(conn, p.Pid, req, st, log)
	if !s.track(e) {
		go e.kill() // Shutdown began while it started
	}
	defer s.untrack(e)

	var pumps sync.WaitGroup
	for _, o := range st.outputs {
		pumps.Add(1)
		go e.pump(o.r, o.kind, pumps.Done)
	}
	go e.input(conn, st.stdin)
	var deadline *time.Timer
	if req.Timeout > 0 {
		deadline = time.AfterFunc(time.Duration(req.Timeout), e.timeout)
	}

	ws := wait()
	elapsed := time.Since(started)
	if deadline != nil {
		deadline.Stop()
	}
	e.mu.Lock()
	e.done = true
	close(e.exited)
	if e.graceT != nil {
		e.graceT.Stop()
	}
	killing, timedOut, gone := e.killing, e.timedOut, e.gone
	e.mu.Unlock()
	if killing {
		<-e.killed
	}
	drain(st, &pumps, log)

	res := execResult(ws, elapsed, timedOut, oomBefore, oomKnown, s.oomKills)
	log.Debug("exec done", "exit", res.ExitCode, "signal", res.Signal, "timed_out", res.TimedOut,
		"caller_gone", gone, "ms", res.DurationMs)
	e.out.finish(FrameResult, res)
}

// newExecution is the execution of the command of req that started as pid
// with stdio st, its frames going to conn.
func newExecution(conn net.Conn, pid int, req sandbox.ExecRequest, st *stdio, log *slog.Logger) *execution {
	grace := time.Duration(req.Grace)
	if grace <= 0 {
		grace = time.Duration(sandbox.DefaultGrace)
	}
	e := &execution{
		pid:    pid,
		grace:  grace,
		tty:    st.tty,
		log:    log,
		exited: make(chan struct{}),
		killed: make(chan struct{}),
	}
	e.out = frameWriter{w: conn, onBreak: e.callerGone}
	return e
}

// execResult is the result of a command that ended as ws after elapsed:
// its exit code or signal, and whether the memory limit killed it (OOM
// kills, as oomKills counts them, past oomBefore, when they are known).
func execResult(ws syscall.WaitStatus, elapsed time.Duration, timedOut bool, oomBefore uint64, oomKnown bool, oomKills func() (uint64, bool)) sandbox.ExecResult {
	res := sandbox.ExecResult{TimedOut: timedOut, DurationMs: elapsed.Milliseconds()}
	switch {
	case ws.Exited():
		res.ExitCode = ws.ExitStatus()
	case ws.Signaled():
		res.ExitCode = -1
		res.Signal = signalName(ws.Signal())
		if ws.Signal() == syscall.SIGKILL && oomKnown {
			n, ok := oomKills()
			res.OOMKilled = ok && n > oomBefore
		}
	}
	return res
}

// receiveInputs reads what follows an exec request before the command
// starts: its secrets (Request.SecretEnv), then its script
// (Request.ShellSize). On an error nothing is kept (the secrets wiped);
// errBroken means the connection broke.
func receiveInputs(conn net.Conn, r Request) ([]secretVar, *os.File, error) {
	var secrets []secretVar
	if r.SecretEnv > 0 {
		var err error
		if secrets, err = receiveSecrets(conn, r.SecretEnv); err != nil {
			return nil, nil, err
		}
	}
	var script *os.File
	if r.ShellSize > 0 {
		var err error
		if script, err = receiveScript(conn, r.ShellSize); err != nil {
			wipeSecrets(secrets)
			return nil, nil, err
		}
	}
	return secrets, script, nil
}

// drain lets the output pumps of an exited command finish: each switches
// to draining with an idle bound, and what still flows after drainCap is
// dropped.
func drain(st *stdio, pumps *sync.WaitGroup, log *slog.Logger) {
	for _, o := range st.outputs {
		o.r.SetReadDeadline(time.Now().Add(drainIdle))
	}
	drained := make(chan struct{})
	go func() {
		pumps.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(drainCap):
		log.Info("exec: output still flowing after exit; dropping the rest")
	}
}

func closeFile(f *os.File) {
	if f != nil {
		f.Close()
	}
}

// track registers e for Shutdown; false when Shutdown has begun.
func (s *Server) track(e *execution) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.execs[e] = struct{}{}
	return !s.closing
}

func (s *Server) untrack(e *execution) {
	s.mu.Lock()
	delete(s.execs, e)
	s.mu.Unlock()
}

// pump streams r as frames of kind until EOF (EIO for a terminal's master:
// every holder of its slave closed it). Once the command has exited
// (its deadline set by exec wakes the pending read), each read may wait at
// most drainIdle: then pump stops streaming and reports done, but reads on,
// dropping, until whoever holds the pipe closes it.
func (e *execution) pump(r *os.File, kind FrameKind, done func()) {
	defer r.Close()
	buf := make([]byte, headerLen+outputChunk)
	streaming := true
	for {
		if streaming && e.isDone() {
			r.SetReadDeadline(time.Now().Add(drainIdle))
		}
		n, err := r.Read(buf[headerLen:])
		if n > 0 && streaming {
			e.out.frame(kind, buf[:headerLen+n])
		}
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			if streaming && e.isDone() {
				streaming = false
				done()
				r.SetReadDeadline(time.Time{})
			}
		default: // EOF: every writer closed it
			if streaming {
				done()
			}
			return
		}
	}
}

func (e *execution) isDone() bool {
	select {
	case <-e.exited:
		return true
	default:
		return false
	}
}

// input reads the caller's frames: stdin frames go to the command's stdin
// (nil when the request has no stdin), FrameEOF closes it, controls are
// applied as they come, and a read error means the caller went away.
func (e *execution) input(conn net.Conn, stdin *os.File) {
	defer func() { closeFile(stdin) }()
	var buf []byte
	for {
		kind, payload, err := ReadFrame(conn, buf)
		if err != nil {
			e.callerGone()
			return
		}
		buf = payload
		switch kind {
		case FrameStdin:
			if stdin == nil {
				continue
			}
			if err := e.writeStdin(conn, stdin, payload); err != nil {
				if errors.Is(err, errHungUp) {
					e.callerGone()
					return
				}
				stdin.Close() // the command closed its stdin: drop the rest
				stdin = nil
			}
		case FrameEOF:
			closeFile(stdin)
			stdin = nil
		case FrameControl:
			e.control(payload)
		}
	}
}

var (
	errHungUp = errors.New("agent: the caller hung up")
	errBroken = errors.New("agent: the connection broke")
)

// writeStdin writes p to the command's stdin. A command that does not read
// blocks it, and with it the reading of the connection; so the write wakes
// every stdinPoll to check whether the caller hung up (errHungUp). Any
// other error means the command closed its stdin.
func (e *execution) writeStdin(conn net.Conn, w *os.File, p []byte) error {
	for len(p) > 0 {
		w.SetWriteDeadline(time.Now().Add(stdinPoll))
		n, err := w.Write(p)
		p = p[n:]
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			if hungUp(conn) {
				return errHungUp
			}
		default:
			return err
		}
	}
	return nil
}

// hungUp reports whether the peer of conn has closed it, without reading:
// poll(2) with POLLRDHUP, which sees a hangup even behind unread data.
func hungUp(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		n, err := unix.Poll(fds, 0)
		gone = err == nil && n > 0 && fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0
	})
	return gone
}

// callerGone starts the grace period after which a command whose caller
// went away is killed. From then on its output is dropped.
func (e *execution) callerGone() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done || e.gone {
		return
	}
	e.gone = true
	e.graceT = time.AfterFunc(e.grace, e.kill)
}

// timeout kills the command at its deadline.
func (e *execution) timeout() {
	e.mu.Lock()
	if e.done {
		e.mu.Unlock()
		return
	}
	e.timedOut = true
	e.mu.Unlock()
	e.kill()
}

// kill kills the command's whole process tree, once, unless it has already
// exited: after that its pid may be reused, and what it left in the
// background was left on purpose.
func (e *execution) kill() {
	e.mu.Lock()
	if e.done || e.killing {
		e.mu.Unlock()
		return
	}
	e.killing = true
	e.mu.Unlock()
	killTree(e.pid)
	close(e.killed)
}

// signalGroup sends sig to the command's process group while it runs.
func (e *execution) signalGroup(sig syscall.Signal) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.done {
		syscall.Kill(-e.pid, sig)
	}
}

func signalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return fmt.Sprintf("SIG%d", int(sig))
}

// frameWriter serializes the frames of one exec: output from two pumps,
// then the result. A write error marks the connection broken (the caller
// went away), calls onBreak once and drops every later frame; after finish
// nothing more is written.
type frameWriter struct {
	w       io.Writer
	onBreak func()

	mu     sync.Mutex
	broken bool
	sealed bool
}

// frame writes buf, whose first headerLen bytes are room for the header.
func (f *frameWriter) frame(kind FrameKind, buf []byte) {
	f.mu.Lock()
	if f.broken || f.sealed {
		f.mu.Unlock()
		return
	}
	err := writeFramed(f.w, kind, buf)
	f.broken = err != nil
	f.mu.Unlock()
	if err != nil && f.onBreak != nil {
		f.onBreak()
	}
}

// finish writes the last frame, v as JSON.
func (f *frameWriter) finish(kind FrameKind, v any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sealed {
		return
	}
	f.sealed = true
	if !f.broken {
		WriteJSON(f.w, kind, v)
	}
}
