package lifecycle

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"

	"github.com/hearth/hearth/sandbox"
)

// Connect opens a stream to TCP port on the loopback of the sandbox ref
// names for p (see Sandboxes.Get), waking it if it sleeps: what the sandbox's URL
// (httpapi's proxy) and the Sprites TCP proxy are made of. It works
// whatever the sandbox's network, since the sandbox's agent makes the
// connection. While the stream is open the sandbox is busy (it does not
// sleep); closing it ends that. Errors: those of Get, invalid_argument for
// a bad port, unavailable when nothing listens on it.
func (s *Processes) Connect(ctx context.Context, p sandbox.Principal, ref string, port int) (net.Conn, error) {
	if err := sandbox.ValidatePort(port); err != nil {
		return nil, err
	}
	sb, ag, err := s.run.running(ctx, p, ref)
	if err != nil {
		return nil, err
	}
	end := s.leases.begin(sb.ID, s.now)
	conn, err := ag.Connect(ctx, port)
	if err != nil {
		end()
		return nil, err
	}
	return &leasedConn{Conn: conn, end: end}, nil
}

// ConnectPublic is Connect for a caller without a token: it reaches a port
// that the sandbox ref names made public (Sandbox.PublicPorts). ref is
// read as by a caller of no tenant: NAME is an operators' sandbox (tenant
// system), TENANT/NAME a tenant's, so that no tenant can take another's
// URL by naming a sandbox alike. Any other port, like a sandbox that does
// not exist or a malformed ref, is not_found: a caller without a token
// learns nothing about private ports.
func (s *Processes) ConnectPublic(ctx context.Context, ref string, port int) (net.Conn, error) {
	missing := sandbox.Errorf(sandbox.CodeNotFound, "no public port %d on sandbox %q", port, ref).
		WithHint("send a token of someone who may see the sandbox, or ask its owner to make the port public")
	sb, err := s.publicRow(ctx, ref)
	if err != nil || isPoolMember(sb) || !slices.Contains(sb.PublicPorts, port) {
		return nil, missing
	}
	// The sandbox's tenant, as no one in particular: a principal with no
	// agent takes names as they are stored (see Principal.Resolve).
	owner := sandbox.Principal{Tenant: sb.Tenant, Role: sandbox.RoleTenantAdmin}
	return s.Connect(ctx, owner, sb.Name, port)
}

// publicRow is the row of the sandbox ref names as a caller without a
// token reads it (see ConnectPublic).
func (s *core) publicRow(ctx context.Context, ref string) (sandbox.Sandbox, error) {
	tenant, name, err := sandbox.Principal{}.Locate(ref)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	return s.opts.Store.Sandboxes().Get(ctx, tenant, name)
}

// Ports returns the sandbox ref names for p and the TCP ports processes in
// it listen on, by port. A sandbox that is not running listens on none:
// Ports does not wake it (its processes would start afresh, with no server
// yet).
func (s *Processes) Ports(ctx context.Context, p sandbox.Principal, ref string) (sandbox.Sandbox, []sandbox.ListeningPort, error) {
	sb, err := s.access(p).get(ctx, ref)
	if err != nil {
		return sandbox.Sandbox{}, nil, err
	}
	if sb.Status != sandbox.StatusRunning {
		return sb, []sandbox.ListeningPort{}, nil
	}
	s.leases.touch(sb.ID, s.now())
	ports, err := s.run.agentOf(sb).Ports(ctx)
	return sb, ports, err
}

// leasedConn is a stream into a sandbox that keeps it busy until closed.
type leasedConn struct {
	net.Conn
	end  func()
	once sync.Once
}

func (c *leasedConn) Close() error {
	c.once.Do(c.end)
	return c.Conn.Close()
}

// CloseWrite half-closes the stream: the server in the sandbox reads the
// end of its input and can still answer.
func (c *leasedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
