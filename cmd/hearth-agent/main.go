// Command hearth-agent is PID 1 inside every hearth sandbox. It listens on a
// unix socket that the daemon reaches from the host and runs commands and
// file operations for it (see package agent).
//
// It must be built static (CGO_ENABLED=0): it runs on whatever root
// filesystem the sandbox has.
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
	"strings"
	"syscall"
	"time"

	"github.com/hearth/hearth/agent"
)

// shutdownGrace is how long running commands get between the SIGTERM the
// agent forwards to them and their SIGKILL, when the agent is stopped.
const shutdownGrace = 5 * time.Second

func main() {
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
	home := fl.String("home", "/home/sandbox", "home and default working directory")
	nproc := fl.Uint64("nproc", 0, "RLIMIT_NPROC of every command (0: none)")
	as := fl.Uint64("address-space", 0, "RLIMIT_AS of every command in bytes (0: none)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	os.Remove(*socket) // a stale socket from an earlier start of this sandbox
	if err := os.MkdirAll(filepath.Dir(*socket), 0o700); err != nil {
		return err
	}
	ln, err := net.Listen("unix", *socket)
	if err != nil {
		return err
	}
	srv := agent.NewServer(agent.Options{
		UID: *uid, GID: *gid, Home: *home,
		Env:          defaultEnv(environ, *home),
		NProc:        *nproc,
		AddressSpace: *as,
		// As PID 1 the agent inherits every orphan of the sandbox.
		ReapOrphans: os.Getpid() == 1,
		Logger:      log,
	})
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	stopped := make(chan error, 1)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		stopped <- srv.Shutdown(sctx)
	}()
	log.Info("listening", "socket", *socket, "pid", os.Getpid())
	if err := srv.Serve(ln); err != nil {
		return err
	}
	if err := <-stopped; err != nil {
		log.Info("commands killed at shutdown", "err", err)
	}
	return nil
}

// defaultEnv is the sandbox's environment as the runtime gave it to PID 1,
// with HOME set to the sandbox user's home.
func defaultEnv(environ []string, home string) []string {
	env := []string{"HOME=" + home}
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	return env
}
