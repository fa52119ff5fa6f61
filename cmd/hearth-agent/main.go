// Command hearth-agent is PID 1 inside every hearth sandbox. It serves a
// unix socket that the daemon reaches from the host and runs commands and
// file operations for it (see package agent): either one it creates itself
// (--socket, in a directory the host shares with the sandbox: under gVisor,
// whose memory checkpoints need the agent to close and reopen it), or a
// listening socket the daemon made on the host and handed down as an open
// descriptor (--listen-fd: under runc and crun, so that nothing the
// sandbox can reach is ever a path the daemon follows).
//
// It must be built static (CGO_ENABLED=0): it runs on whatever root
// filesystem the sandbox has.
//
// Under gVisor every system call the agent makes is a round trip to the
// sentry, tens of µs of the host's CPU, and the agent's start is part of
// every create. So its runtime makes none it does not need: it does not
// name its memory mappings (decoratemappings, a prctl per mapping) nor
// size GOMAXPROCS from its cgroup (containermaxprocs, files read at start
// and each second after), and main runs it on one P (see main).
//
//go:debug decoratemappings=0
//go:debug containermaxprocs=0
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hearth/hearth/agent"
)

// shutdownGrace is how long running commands get between the SIGTERM the
// agent forwards to them and their SIGKILL, when the agent is stopped.
const shutdownGrace = 5 * time.Second

// quiesceDrain is how long the operations in flight get to end when the
// agent goes quiet for a memory checkpoint (see agent.QuiesceSignal),
// before their connections are closed; the host waits longer for it.
const quiesceDrain = 2 * time.Second

func main() {
	// One P: the agent waits on its sandbox's commands and sockets and
	// computes little, and a second P costs it, under gVisor, the futex
	// wake-ups and yields of the scheduler's spinning and work stealing.
	// Setting it also stops the runtime's periodic GOMAXPROCS updates.
	// The runtime has made its processors before main runs, and a second
	// one's structures and span cache stay in memory (0.2 MiB of every
	// idle sandbox under gVisor); the driver avoids them by starting the
	// agent with GOMAXPROCS=1 in its environment, which --unset keeps
	// from the commands.
	runtime.GOMAXPROCS(1)
	if err := run(context.Background(), os.Args[1:], os.Environ(), os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "hearth-agent:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends or SIGTERM/SIGINT arrives, then shuts down:
// commands get SIGTERM, and SIGKILL after shutdownGrace.
func run(ctx context.Context, args, environ []string, stderr io.Writer) error {
	fl := flag.NewFlagSet("hearth-agent", flag.ContinueOnError)
	fl.SetOutput(stderr)
	socket := fl.String("socket", "/run/hearth/agent.sock", "unix socket to listen on")
	uid := fl.Int("uid", 1000, "uid commands run as")
	gid := fl.Int("gid", 1000, "gid commands run as")
	home := fl.String("home", "/home/sandbox", "the sandbox user's home: $HOME, and the default working directory unless --workdir names one")
	workdir := fl.String("workdir", "", "default working directory and base of relative paths (empty: --home)")
	nproc := fl.Uint64("nproc", 0, "RLIMIT_NPROC of every command (0: none)")
	memory := fl.Uint64("memory", 0, "the sandbox's memory limit in bytes, which the agent enforces as PID 1 by killing the largest process past it (gVisor; 0: none)")
	threads := fl.Int("threads", 0, "OS threads to create at start and keep idle, for when commands have used up the sandbox's pids (0: none)")
	listenFD := fl.Int("listen-fd", -1, "serve this inherited listening socket instead of creating --socket (-1: none)")
	var unset []string
	fl.Func("unset", "a variable of the agent's own environment that commands do not get: the runtime set it for the agent alone (repeatable)", func(name string) error {
		if name == "" || strings.Contains(name, "=") {
			return fmt.Errorf("not a variable name: %q", name)
		}
		unset = append(unset, name)
		return nil
	})
	if err := fl.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	defer keepHangups()()
	reserveThreads(*threads)
	// PID 1 of a sandbox; a test's agent leaves its process as it is.
	pid1 := os.Getpid() == 1
	if pid1 {
		if err := lockDown(); err != nil {
			return err
		}
	}
	opts := agent.Options{
		UID: *uid, GID: *gid, Home: *home, WorkDir: *workdir,
		Env:   defaultEnv(environ, *home, unset),
		NProc: *nproc,
		// As PID 1 the agent inherits every orphan of the sandbox.
		ReapOrphans: pid1,
		Logger:      log,
	}
	if pid1 {
		// Only PID 1 sees no process but the sandbox's.
		opts.Memory = *memory
	}
	srv := agent.NewServer(opts)
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *listenFD >= 0 {
		return serveInherited(ctx, srv, *listenFD, log)
	}
	return serveSocket(ctx, srv, *socket, log)
}

// keepHangups has the agent catch SIGHUP (and drop it) until the returned
// func is called. A process started with SIGHUP ignored, as under nohup, keeps
// it ignored and hands that to every command it runs, which would then
// shrug off a hang-up, an exec's signal control included; a caught signal
// is reset to its default action in a command at its exec. (Go catches
// every other signal already, and SIGINT the agent catches itself.)
func keepHangups() (stop func()) {
	hangups := make(chan os.Signal, 1)
	signal.Notify(hangups, syscall.SIGHUP)
	return func() { signal.Stop(hangups) }
}

// serveSocket serves srv on a unix socket it makes at socket (runsc)
// until ctx ends, then shuts down: each agent.QuiesceSignal closes the
// socket, quiets srv and waits for the resume marker (see
// agent.QuiesceSignal) before it listens again.
func serveSocket(ctx context.Context, srv *agent.Server, socket string, log *slog.Logger) error {
	if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
		return err
	}
	quiesce := make(chan os.Signal, 1)
	signal.Notify(quiesce, agent.QuiesceSignal)
	defer signal.Stop(quiesce)
	for {
		os.Remove(socket) // a stale socket from an earlier start of this sandbox
		ln, err := net.Listen("unix", socket)
		if err != nil {
			return err
		}
		// The socket's file goes when the agent is quiet, not when its
		// listener closes: the host takes its going as the quiet, and
		// Quiesce closes the listener before its operations have ended.
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		log.Info("listening", "socket", socket, "pid", os.Getpid())
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		for quiet := false; !quiet; {
			select {
			case err := <-served:
				return err
			case <-quiesce:
				// A late signal finds the resume marker (see
				// agent.QuiesceSignal): stay.
				if quiet = os.Remove(agent.ResumeMarker(socket)) != nil; !quiet {
					log.Info("quiesce signal after its resume marker: staying")
				}
			case <-ctx.Done():
				sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
				err := srv.Shutdown(sctx)
				cancel()
				if err != nil {
					log.Info("commands killed at shutdown", "err", err)
				}
				return <-served
			}
		}
		// Quiet for a memory checkpoint: no socket to the host until the
		// daemon says so (see agent.QuiesceSignal).
		qctx, cancel := context.WithTimeout(ctx, quiesceDrain)
		srv.Quiesce(qctx)
		cancel()
		os.Remove(socket)
		log.Info("quiet until resumed", "marker", agent.ResumeMarker(socket))
		if err := waitResume(ctx, agent.ResumeMarker(socket)); err != nil {
			sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
			defer cancel()
			srv.Shutdown(sctx)
			return nil
		}
	}
}

// serveInherited serves the listening socket the daemon passed as
// descriptor fd until ctx ends, then shuts down like run. The socket is
// the host's: the agent never quiets (no memory checkpoint under runc or
// crun) and so ignores QuiesceSignal, and it leaves the socket's file, in
// a host directory it cannot see, alone.
func serveInherited(ctx context.Context, srv *agent.Server, fd int, log *slog.Logger) error {
	f := os.NewFile(uintptr(fd), "listener")
	if f == nil {
		return fmt.Errorf("--listen-fd %d: not a descriptor", fd)
	}
	ln, err := net.FileListener(f) // a duplicate, close-on-exec
	f.Close()                      // so that no command inherits the socket
	if err != nil {
		return fmt.Errorf("--listen-fd %d: %w", fd, err)
	}
	signal.Ignore(agent.QuiesceSignal)
	log.Info("listening", "fd", fd, "pid", os.Getpid())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	err = srv.Shutdown(sctx)
	cancel()
	if err != nil {
		log.Info("commands killed at shutdown", "err", err)
	}
	return <-served
}

// reserveThreads makes the Go runtime create n OS threads now and keep
// them: the runtime never ends an idle thread, and takes an idle one before
// it creates one. Under runc and crun the sandbox's pids cgroup counts the
// agent's threads with the commands' processes, so a fork bomb can fill it;
// an agent that then needed a new thread (a goroutine blocking in a system
// call hands its processor to another thread) would die of it, and the
// sandbox with it (PID 1). With threads in reserve it goes on, and kills
// the bomb at its deadline.
func reserveThreads(n int) {
	var locked, done sync.WaitGroup
	release := make(chan struct{})
	locked.Add(n)
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			// While locked, the goroutine's thread runs nothing else: n
			// locked at once are n threads.
			runtime.LockOSThread()
			locked.Done()
			<-release
			runtime.UnlockOSThread()
		}()
	}
	locked.Wait()
	close(release)
	done.Wait()
}

// waitResume waits until the file marker exists, then removes it; it
// returns ctx's error if ctx ends first.
func waitResume(ctx context.Context, marker string) error {
	for {
		if err := os.Remove(marker); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// defaultEnv is the sandbox's environment as the runtime gave it to PID 1,
// with HOME set to the sandbox user's home and without the variables
// named in unset.
func defaultEnv(environ []string, home string, unset []string) []string {
	env := []string{"HOME=" + home}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if name != "HOME" && !slices.Contains(unset, name) {
			env = append(env, kv)
		}
	}
	return env
}
