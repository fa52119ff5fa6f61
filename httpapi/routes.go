package httpapi

import (
	"net/http"
	"slices"

	"github.com/hearth/hearth/console"
	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/sandbox"
)

// routes lists every route of the API with its verb: the one stable name
// the audit log and the metrics know the operation by, and its query
// parameters (strict's; the handlers of routes with a nil query read
// theirs). GET patterns also answer HEAD. Paths name the sandbox; file
// paths travel in the query (?path=), never in the URL path, so that they
// need no escaping rules of their own. A route that reads a body or
// messages about a sandbox is Visible: the chain checks first that the
// caller may see it; the long-lived ones are Streams.
func (s *server) routes() []door.Route {
	return slices.Concat(s.adminRoutes(), s.imageRoutes(), s.sandboxRoutes(), s.sandboxIORoutes())
}

// adminRoutes are the routes of the daemon, tenants, agents, tokens,
// secrets and bindings.
func (s *server) adminRoutes() []door.Route {
	a := admin{s}
	return []door.Route{
		{Pattern: "GET /v1/health", Verb: "health", Auth: door.AuthNone, Quiet: true, Handle: handle(a.handleHealth)},
		// The web console's page and assets: public, holding nothing; what
		// it shows comes from the API, with its user's token.
		{Pattern: "GET " + console.Prefix, Verb: "console", Auth: door.AuthNone, Quiet: true, Handle: serveConsole},
		strict("GET /v1/pool", "pool.get", a.handlePool),
		strict("GET /v1/limits", "limits.get", a.handleLimits, "tenant", "agent"),
		{Pattern: "GET /v1/audit", Verb: "audit.list", Handle: handle(a.handleAudit)},
		strict("GET /metrics", "metrics.get", a.handleMetrics),

		strict("POST /v1/tenants", "tenant.create", a.handleCreateTenant),
		strict("GET /v1/tenants", "tenant.list", a.handleListTenants),
		strict("GET /v1/tenants/{tenant}", "tenant.get", a.handleGetTenant),
		strict("PATCH /v1/tenants/{tenant}", "tenant.update", a.handleUpdateTenant),
		strict("POST /v1/agents", "agent.create", a.handleCreateAgent),
		strict("GET /v1/agents", "agent.list", a.handleListAgents, "tenant"),
		strict("POST /v1/tokens", "token.create", a.handleCreateToken),
		strict("GET /v1/tokens", "token.list", a.handleListTokens),
		strict("DELETE /v1/tokens/{id}", "token.revoke", a.handleRevokeToken),
		strict("PUT /v1/secrets/{secret}", "secret.set", a.handleSetSecret, "tenant"),
		strict("GET /v1/secrets", "secret.list", a.handleListSecrets, "tenant"),
		strict("DELETE /v1/secrets/{secret}", "secret.delete", a.handleDeleteSecret, "tenant"),
		strict("PUT /v1/bindings/{binding}", "binding.set", a.handleSetBinding, "tenant"),
		strict("GET /v1/bindings", "binding.list", a.handleListBindings, "tenant"),
		strict("DELETE /v1/bindings/{binding}", "binding.delete", a.handleDeleteBinding, "tenant"),
	}
}

// imageRoutes are the routes of images and registry logins.
func (s *server) imageRoutes() []door.Route {
	im := images{s}
	return []door.Route{
		// An image is named in the query (?name=): its name holds '/' and
		// ':'. Pulls, imports and exports are long-lived.
		strict("GET /v1/images", "image.list", im.handleList),
		target(strict("POST /v1/images", "image.create", im.handleCreate), imageFrom),
		makesImage(stream(strict("POST /v1/images/pull", "image.pull", im.handlePull))),
		makesImage(stream(strict("POST /v1/images/import", "image.import", im.handleImport, "name", "progress"))),
		makesImage(stream(strict("POST /v1/images/build", "image.build", im.handleBuild, "name", "progress", "network"))),
		strict("GET /v1/image", "image.get", im.handleGet, "name"),
		strict("DELETE /v1/image", "image.delete", im.handleRemove, "name"),
		strict("POST /v1/image/public", "image.public", im.handleSetPublic, "name"),
		stream(strict("GET /v1/image/export", "image.export", im.handleExport, "name")),
		// Node to node only: a layer of an image the calling node lacks.
		stream(door.Route{Pattern: "GET /v1/internal/layers/{key}", Verb: "image.send_layer", Auth: door.AuthNode, Handle: handle(im.handleSendLayer)}),
		strict("PUT /v1/registries/{host}", "registry.login", im.handleLogin),
		strict("GET /v1/registries", "registry.list", im.handleLogins),
		strict("DELETE /v1/registries/{host}", "registry.logout", im.handleLogout),
	}
}

// sandboxRoutes are the routes of sandboxes' lifecycles: create to
// destroy, sleep, moves, checkpoints.
func (s *server) sandboxRoutes() []door.Route {
	sb := sandboxes{s}
	return []door.Route{
		strict("POST /v1/sandboxes", door.VerbCreate, sb.handleCreate),
		strict("GET /v1/sandboxes", "sandbox.list", sb.handleList),
		strict("GET /v1/sandboxes/{name}", "sandbox.get", sb.handleGet),
		visible(strict("PATCH /v1/sandboxes/{name}", "sandbox.update", sb.handleUpdate)),
		strict("DELETE /v1/sandboxes/{name}", "sandbox.destroy", sb.handleDestroy),

		strict("POST /v1/sandboxes/{name}/sleep", "sandbox.sleep", sb.handleSleep),
		strict("POST /v1/sandboxes/{name}/wake", "sandbox.wake", sb.handleWake),
		visible(strict("POST /v1/sandboxes/{name}/move", "sandbox.move", sb.handleMove)),
		strict("PUT /v1/nodes/{node}/cordon", "node.cordon", sb.handleCordon),
		strict("DELETE /v1/nodes/{node}/cordon", "node.uncordon", sb.handleCordon),
		// Node to node only: the root and checkpoints of a sandbox moving
		// here.
		{Pattern: "PUT /v1/internal/sandboxes/{id}/root", Verb: "sandbox.receive", Auth: door.AuthNode, Handle: handle(sb.handleReceiveSnapshot)},
		{Pattern: "PUT /v1/internal/sandboxes/{id}/checkpoints/{ck}", Verb: "sandbox.receive", Auth: door.AuthNode, Handle: handle(sb.handleReceiveSnapshot)},
		{Pattern: "PUT /v1/internal/sandboxes/{id}/checkpoints/{ck}/memory", Verb: "sandbox.receive", Auth: door.AuthNode, Handle: handle(sb.handleReceiveSnapshot)},

		visible(strict("POST /v1/sandboxes/{name}/checkpoints", "checkpoint.create", sb.handleCheckpoint)),
		strict("GET /v1/sandboxes/{name}/checkpoints", "checkpoint.list", sb.handleListCheckpoints),
		strict("GET /v1/sandboxes/{name}/usage", "sandbox.usage", sb.handleUsage, "since"),
		strict("GET /v1/gone", "sandbox.gone", sb.handleGone),
		strict("DELETE /v1/sandboxes/{name}/checkpoints/{id}", "checkpoint.delete", sb.handleDeleteCheckpoint),
		visible(strict("POST /v1/sandboxes/{name}/restore", "sandbox.restore", sb.handleRestore)),
		visible(strict("POST /v1/sandboxes/{name}/fork", "sandbox.fork", sb.handleFork)),
	}
}

// sandboxIORoutes are the routes into a running sandbox: exec, its
// ports and URLs, its files.
func (s *server) sandboxIORoutes() []door.Route {
	f, px, x := files{s}, proxies{s}, execs{s}
	return []door.Route{
		x.route(),
		{Pattern: "GET /v1/sandboxes/{name}/ports", Verb: "sandbox.ports", Handle: handle(px.handlePorts)},
		// Every method: a token is optional, public ports need none.
		// (The proxy holds one of the caller's connections once it has its
		// target.)
		{Pattern: "/v1/sandboxes/{name}/proxy/{port}/{path...}", Verb: verbProxy, Auth: door.AuthOptional, Handle: handle(px.handleProxy)},
		{Pattern: "/v1/sandboxes/{name}/proxy/{port}", Verb: verbProxy, Auth: door.AuthNone, Handle: handle(px.handleProxyRoot)},
		{Match: px.isHost, Sandbox: px.hostName, Verb: verbProxy, Auth: door.AuthOptional, Handle: handle(px.handleHost)},

		// (A file transfer holds one of the caller's connections once its
		// request is checked.)
		{Pattern: "GET /v1/sandboxes/{name}/fs/file", Verb: "fs.read", Handle: handle(f.handleReadFile)},
		{Pattern: "PUT /v1/sandboxes/{name}/fs/file", Verb: "fs.write", Visible: true, Handle: handle(f.handleWriteFile)},
		{Pattern: "DELETE /v1/sandboxes/{name}/fs/file", Verb: "fs.remove", Handle: handle(f.handleRemove)},
		{Pattern: "GET /v1/sandboxes/{name}/fs/list", Verb: "fs.list", Handle: handle(f.handleListDir)},
		{Pattern: "GET /v1/sandboxes/{name}/fs/stat", Verb: "fs.stat", Handle: handle(f.handleStat)},
		{Pattern: "POST /v1/sandboxes/{name}/fs/mkdir", Verb: "fs.mkdir", Handle: handle(f.handleMkdir)},
		{Pattern: "POST /v1/sandboxes/{name}/fs/rename", Verb: "fs.rename", Handle: handle(f.handleRename)},
		{Pattern: "POST /v1/sandboxes/{name}/fs/chmod", Verb: "fs.chmod", Handle: handle(f.handleChmod)},
	}
}

// strict is the route of h that takes the query parameters params (each
// once) and no other: docs/API.md promises strict queries, so an unknown
// one is invalid_argument naming it.
func strict(pattern, verb string, h handler, params ...string) door.Route {
	return door.Route{Pattern: pattern, Verb: verb, Handle: handle(h),
		Check: func(_ http.ResponseWriter, r *http.Request) error { return queryParams(r, params...).err }}
}

// visible marks rt Visible.
func visible(rt door.Route) door.Route {
	rt.Visible = true
	return rt
}

// stream marks rt a Stream: it holds one of the caller's connections.
func stream(rt door.Route) door.Route {
	rt.Stream = true
	return rt
}

// target sets rt's Target.
func target(rt door.Route, f func(r *http.Request) string) door.Route {
	rt.Target = f
	return rt
}

// makesImage marks rt MakesImage.
func makesImage(rt door.Route) door.Route {
	rt.MakesImage = true
	return rt
}

// serveConsole answers the web console's page and assets.
func serveConsole(w http.ResponseWriter, r *http.Request, _ sandbox.Principal) error {
	consoleHandler.ServeHTTP(w, r)
	return nil
}

var consoleHandler = console.Handler()

// handle adapts h, which answers its errors itself, to door.Route.Handle.
func handle(h handler) func(http.ResponseWriter, *http.Request, sandbox.Principal) error {
	return func(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
		h(w, r, p)
		return nil
	}
}
