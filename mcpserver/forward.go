package mcpserver

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hearth/hearth/sandbox"
)

// Forwarder sends a tool call on a sandbox that another node runs to
// that node (cluster.Forwarder): the door's part of "any daemon answers
// for any sandbox".
type Forwarder interface {
	// NodeOf returns the node that runs the sandbox ref names, as p may
	// see it, when that is another node; "" otherwise.
	NodeOf(ctx context.Context, p sandbox.Principal, ref string) string
	// NodeClient returns node's base URL and a client whose requests
	// carry this node's credential, or unavailable when node is gone.
	NodeClient(ctx context.Context, node string) (*url.URL, *http.Client, error)
}

// forwardCall makes req, a tools/call by p on a sandbox of another node,
// on that node's MCP door, in a session of its own opened with the
// caller's token (the owner authenticates the caller itself), and returns
// its result as that node gave it; ok is false for a call this node
// serves. A create is always this node's, and a call that names no
// sandbox.
func (s *Server) forwardCall(ctx context.Context, p sandbox.Principal, req mcp.Request) (res *mcp.CallToolResult, ok bool) {
	r, isCall := req.(*mcp.CallToolRequest)
	if s.opts.Forward == nil || !isCall || r.Params == nil || r.Params.Name == "sandbox_create" || r.Extra == nil {
		return nil, false
	}
	node, err := s.nodeFor(ctx, p, r.Params)
	if err != nil {
		return errorResult(sandbox.AsError(err)), true
	}
	if node == "" {
		return nil, false
	}
	res, err = s.callOn(ctx, node, r.Extra.Header.Get("Authorization"), r.Params)
	if err != nil {
		return errorResult(sandbox.AsError(err)), true
	}
	return res, true
}

// nodeFor is the node a tool call by p goes to: the node of the sandbox
// it names, when another node runs it; for an image pull on a daemon
// that makes no image, the node Options.ImageNode chooses; "" to serve it
// here.
func (s *Server) nodeFor(ctx context.Context, p sandbox.Principal, params *mcp.CallToolParamsRaw) (string, error) {
	if params.Name == "image_pull" && s.opts.ImageNode != nil {
		return s.opts.ImageNode(ctx)
	}
	var args struct {
		Sandbox string `json:"sandbox"`
	}
	if json.Unmarshal(params.Arguments, &args) != nil || args.Sandbox == "" {
		return "", nil
	}
	return s.opts.Forward.NodeOf(ctx, p, args.Sandbox), nil
}

// callOn calls the tool of params on node's MCP door with authorization.
func (s *Server) callOn(ctx context.Context, node, authorization string, params *mcp.CallToolParamsRaw) (*mcp.CallToolResult, error) {
	base, hc, err := s.opts.Forward.NodeClient(ctx, node)
	if err != nil {
		return nil, err
	}
	hc = &http.Client{Transport: withHeader{next: hc.Transport, key: "Authorization", value: authorization}}
	c := mcp.NewClient(&mcp.Implementation{Name: "hearth-node", Version: s.opts.Version}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base.JoinPath("/mcp").String(), HTTPClient: hc, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.CodeUnavailable, "node %s, which runs the sandbox, does not answer: %v", node, err).
			WithHint("retry shortly").With("node", node).With("retry_after_seconds", 1)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: params.Name, Arguments: params.Arguments, Meta: params.Meta})
	if err != nil {
		return nil, sandbox.Errorf(sandbox.CodeUnavailable, "node %s, which runs the sandbox, failed the call: %v", node, err).
			WithHint("retry shortly").With("node", node).With("retry_after_seconds", 1)
	}
	return res, nil
}

// withHeader is a transport that sets one header on every request.
type withHeader struct {
	next       http.RoundTripper
	key, value string
}

func (t withHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(t.key, t.value)
	return t.next.RoundTrip(r)
}
