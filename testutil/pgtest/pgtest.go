// Package pgtest runs a throwaway Postgres cluster for a test binary and
// hands each test an empty database of its own in it, for the tests of
// store/postgres.
//
// The cluster is Debian's Postgres (the newest /usr/lib/postgresql/N/bin;
// 13 or newer, for DROP DATABASE … WITH (FORCE)), started at the first
// NewDatabase of the test binary and stopped by Stop, which the package's
// TestMain calls after every test; Restart restarts it in place, for the
// tests of clients that must survive a server restart. It lives in a
// temporary directory: data and unix socket there, TCP on 127.0.0.1 on a
// free port (kept across restarts) and on no other address. Postgres
// refuses to run as root, so a test binary running as root runs initdb
// and postgres as the postgres system user, which owns that directory.
// The superuser's password is random and known only to the test binary
// (password authentication over TCP, the socket reachable only by that
// user). Should the test binary die without Stop, the postmaster gets
// SIGINT (its parent-death signal) and shuts down, but its directory
// stays behind.
//
// The cluster trades durability for speed (fsync=off): a crash of the
// machine loses it, which no test of a throwaway cluster minds.
package pgtest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hearth/hearth/testutil/testenv"
)

// superuser is the cluster's superuser, whose password is random.
const superuser = "postgres"

// startTimeout bounds how long the cluster takes to accept connections.
const startTimeout = 60 * time.Second

// cluster is the test binary's cluster: started by the first NewDatabase,
// stopped by Stop. Test binaries are the unit of isolation, so this is the
// one piece of package state, like drivertest's layer store.
var cluster struct {
	sync.Mutex
	c   *server
	err error // why the start failed: every later test fails with it too
	n   int   // databases made so far, for unique names
}

// NewDatabase returns the connection string (a postgres:// URL) of a new,
// empty database in the test binary's cluster, starting the cluster at the
// first call; the database is dropped when t ends (after the cleanups that
// t registers later, such as closing the store that uses it). It skips t
// with testenv.Skip, which fails it under HEARTH_TEST_STRICT, when Postgres
// is not installed; any other failure to start the cluster fails t.
func NewDatabase(t testing.TB) string {
	t.Helper()
	bin, err := binDir()
	if err != nil {
		testenv.Skip(t, "Postgres is not installed (apt-get install postgresql): %v", err)
	}
	cluster.Lock()
	defer cluster.Unlock()
	if cluster.c == nil && cluster.err == nil {
		cluster.c, cluster.err = start(bin)
	}
	if cluster.err != nil {
		t.Fatalf("start a Postgres cluster: %v", cluster.err)
	}
	cluster.n++
	name := fmt.Sprintf("pgtest_%d", cluster.n)
	c := cluster.c
	if err := c.admin(t.Context(), "CREATE DATABASE "+name+" TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C'"); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		// FORCE: a connection the test leaked must not keep the database.
		if err := c.admin(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	return c.dsn(name)
}

// Restart restarts the test binary's cluster as a failover or a
// restarted server looks to its clients: the postmaster gets a fast
// shutdown (SIGINT: every session is ended, a connection made before
// fails at its next use) and starts again on the same port and data
// directory, so that every database, row and password survives and
// every DSN NewDatabase returned connects again. It returns once the
// cluster accepts connections, and logs how long it was down. It fails t
// when NewDatabase has not started the cluster or the cluster does not
// come back; a failed start fails every later NewDatabase too.
func Restart(t testing.TB) {
	t.Helper()
	cluster.Lock()
	defer cluster.Unlock()
	if cluster.c == nil {
		t.Fatal("pgtest.Restart: no cluster runs (NewDatabase starts it)")
	}
	began := time.Now()
	if err := cluster.c.restart(); err != nil {
		cluster.c.stop()
		cluster.c, cluster.err = nil, fmt.Errorf("restart: %w", err)
		t.Fatalf("restart the Postgres cluster: %v", err)
	}
	t.Logf("pgtest: Postgres on port %d restarted (down for %s)", cluster.c.port, time.Since(began).Round(time.Millisecond))
}

// Stop stops the cluster NewDatabase started, if any, and removes its
// files; for TestMain, after every test.
func Stop() {
	cluster.Lock()
	defer cluster.Unlock()
	if cluster.c != nil {
		cluster.c.stop()
		cluster.c = nil
	}
}

// binDir returns the newest installed Postgres's bin directory
// (/usr/lib/postgresql/N/bin, where Debian puts initdb and postgres).
func binDir() (string, error) {
	dirs, err := filepath.Glob("/usr/lib/postgresql/*/bin")
	if err != nil {
		return "", err
	}
	version := func(d string) int {
		n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		return n
	}
	dirs = slices.DeleteFunc(dirs, func(d string) bool {
		_, err := os.Stat(filepath.Join(d, "initdb"))
		return err != nil || version(d) == 0
	})
	if len(dirs) == 0 {
		return "", errors.New("no /usr/lib/postgresql/*/bin/initdb")
	}
	slices.SortFunc(dirs, func(a, b string) int { return version(a) - version(b) })
	return dirs[len(dirs)-1], nil
}

// server is a running cluster.
type server struct {
	bin      string              // Postgres's bin directory
	cred     *syscall.Credential // whom Postgres runs as (nil: this process)
	dir      string              // temporary: data/, sock/, postgres.log
	port     int
	password string
	cmd      *exec.Cmd
	exited   chan struct{} // closed when the postmaster exits
}

// dsn is the URL of database name as the superuser, over TCP.
func (s *server) dsn(name string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(superuser, s.password),
		Host:     "127.0.0.1:" + strconv.Itoa(s.port),
		Path:     "/" + name,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// admin runs sql in the postgres database on a connection of its own.
func (s *server) admin(ctx context.Context, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.dsn("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// start makes a cluster in a new temporary directory and starts it; on an
// error it leaves nothing behind. A port taken between the choice and the
// bind is tried again with another.
func start(bin string) (*server, error) {
	cred, owner, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	s := &server{bin: bin, cred: cred, dir: dir, password: rand.Text()}
	if err := s.initdb(owner); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err == nil {
			err = s.run(port)
		}
		if err == nil {
			return s, nil
		}
		if attempt == 3 {
			os.RemoveAll(dir)
			return nil, err
		}
	}
}

// restart shuts the postmaster down (fast) and runs it again on its
// port and data directory. The port is the one clients know, so it is not
// traded for another: should something take it meanwhile, the start is
// tried again, twice, and then fails.
func (s *server) restart() error {
	s.shutdown()
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		if err = s.run(s.port); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// runAs returns the credential to run Postgres with (nil: as this process)
// and the uid and gid that must own its files. Root runs it as the
// postgres system user.
func runAs() (*syscall.Credential, [2]int, error) {
	if os.Geteuid() != 0 {
		return nil, [2]int{os.Geteuid(), os.Getegid()}, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, [2]int{}, fmt.Errorf("Postgres refuses to run as root and there is no postgres user to run it as: %w", err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return nil, [2]int{}, fmt.Errorf("user postgres: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, [2]int{uid, gid}, nil
}

// initdb makes the directory tree, owned by owner, and the cluster in
// data/ with the superuser's password.
func (s *server) initdb(owner [2]int) error {
	pwfile := filepath.Join(s.dir, "pw")
	if err := os.WriteFile(pwfile, []byte(s.password+"\n"), 0o600); err != nil {
		return err
	}
	defer os.Remove(pwfile)
	if err := os.Mkdir(filepath.Join(s.dir, "sock"), 0o700); err != nil {
		return err
	}
	for _, p := range []string{s.dir, pwfile, filepath.Join(s.dir, "sock")} {
		if err := os.Chown(p, owner[0], owner[1]); err != nil {
			return err
		}
	}
	cmd := command(s.cred, filepath.Join(s.bin, "initdb"),
		"-D", filepath.Join(s.dir, "data"), "-U", superuser, "--pwfile", pwfile,
		"--auth-local", "trust", "--auth-host", "scram-sha-256",
		"-E", "UTF8", "--locale", "C", "--no-sync", "--no-instructions")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %v\n%s", err, out)
	}
	return nil
}

// run starts the postmaster on port and waits until it accepts
// connections; on an error it is stopped.
func (s *server) run(port int) error {
	s.port = port
	logPath := filepath.Join(s.dir, "postgres.log")
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	s.cmd = command(s.cred, filepath.Join(s.bin, "postgres"),
		"-D", filepath.Join(s.dir, "data"),
		"-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+filepath.Join(s.dir, "sock"),
		"-c", "max_connections=200",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	s.exited = make(chan struct{})
	go func() { s.cmd.Wait(); close(s.exited) }()
	if err := s.waitReady(); err != nil {
		s.shutdown()
		log, _ := os.ReadFile(logPath)
		return fmt.Errorf("%w\npostgres.log:\n%s", err, log)
	}
	return nil
}

// waitReady waits until the cluster accepts a connection, it exits, or
// startTimeout passes.
func (s *server) waitReady() error {
	deadline := time.Now().Add(startTimeout)
	for {
		err := s.admin(context.Background(), "SELECT 1")
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("postgres exited: %v", s.cmd.ProcessState)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres on port %d not ready after %v: %w", s.port, startTimeout, err)
		}
	}
}

// stop stops the postmaster and removes the cluster's files.
func (s *server) stop() {
	s.shutdown()
	os.RemoveAll(s.dir)
}

// shutdown asks the postmaster for a fast shutdown (SIGINT: sessions are
// ended, nothing waits for clients) and waits for it, killing it if it
// takes more than 30 seconds.
func (s *server) shutdown() {
	s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
}

// command returns an exec.Cmd for Postgres's name with args, run with
// cred (nil: as this process), in a small fixed environment, and sent
// SIGINT (fast shutdown) should the test binary die without Stop.
func command(cred *syscall.Credential, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "TZ=UTC"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGINT}
	return cmd
}

// freePort returns a TCP port on 127.0.0.1 that nothing listens on (it
// was free a moment ago; start tries again should postgres lose it).
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
