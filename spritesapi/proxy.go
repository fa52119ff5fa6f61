package spritesapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/coder/websocket"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/sandbox"
)

// proxyRequest is the first message of a TCP proxy socket.
type proxyRequest struct {
	Host string `json:"host"`
	Port int    `json:"port"`
}

// proxyReply answers it: status "connected" and the target, or "error"
// and why.
type proxyReply struct {
	Status  string `json:"status"`
	Target  string `json:"target,omitempty"`
	Message string `json:"message,omitempty"`
}

// proxyHandshake bounds the wait for the first message.
const proxyHandshake = 30 * time.Second

// handleTCPProxy is Sprites' TCP proxy: over a WebSocket, the client names
// a port ({"host":"localhost","port":5432}), the server connects to it in
// the sprite and answers {"status":"connected","target":"localhost:5432"},
// and binary messages then carry the TCP stream both ways until either
// side closes. Only the sprite's own loopback is reachable (hearth
// connects through the sandbox's agent, whatever its network).
func (d *server) handleTCPProxy(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
	name := r.PathValue("name") // the route is Visible: p may see it
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return nil // Accept has answered
	}
	defer ws.CloseNow()
	ctx, cancel := context.WithTimeout(r.Context(), proxyHandshake)
	typ, msg, err := ws.Read(ctx)
	cancel()
	if err != nil {
		return nil
	}
	refuse := func(e *sandbox.Error) error {
		door.NoteCode(r, e.Code)
		b, _ := json.Marshal(proxyReply{Status: "error", Message: e.Error()})
		ws.Write(r.Context(), websocket.MessageText, b)
		ws.Close(websocket.StatusNormalClosure, "")
		return nil
	}
	var req proxyRequest
	if typ != websocket.MessageText || json.Unmarshal(msg, &req) != nil {
		return refuse(sandbox.Errorf(sandbox.CodeInvalidArgument, "the first message is not {\"host\",\"port\"}").
			WithHint(`send {"host":"localhost","port":5432} as a text message`))
	}
	switch req.Host {
	case "", "localhost", "127.0.0.1", "::1", "[::1]":
	default:
		return refuse(sandbox.Errorf(sandbox.CodeInvalidArgument, "host %q is not the sprite's own loopback", req.Host).
			WithHint("connect to localhost: the proxy reaches ports inside the sprite"))
	}
	conn, err := d.svc.Processes.Connect(r.Context(), p, name, req.Port)
	if err != nil {
		return refuse(sandbox.AsError(err))
	}
	defer conn.Close()
	target := "localhost:" + strconv.Itoa(req.Port)
	b, _ := json.Marshal(proxyReply{Status: "connected", Target: target})
	if err := ws.Write(r.Context(), websocket.MessageText, b); err != nil {
		return nil
	}
	stream := websocket.NetConn(context.WithoutCancel(r.Context()), ws, websocket.MessageBinary)
	done := make(chan struct{}, 2)
	go func() {
		io.Copy(conn, stream)
		done <- struct{}{}
	}()
	go func() {
		io.Copy(stream, conn)
		done <- struct{}{}
	}()
	<-done // a WebSocket has no half-close: one side ending ends both
	stream.Close()
	conn.Close()
	<-done
	return nil
}
