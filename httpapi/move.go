package httpapi

import (
	"net/http"
	"strings"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/sandbox"
)

// moveRequest is the body of POST /v1/sandboxes/{name}/move.
type moveRequest struct {
	Node string `json:"node"`
}

// handleMove moves a sleeping sandbox to another node (operators only),
// the one the body names or, when it names none, one the sandbox's node
// chooses. The chain sends the call to the sandbox's node, which does the
// move.
func (s sandboxes) handleMove(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	var req moveRequest
	if err := s.decode(w, r, &req); err != nil {
		door.WriteError(w, r, err)
		return
	}
	sb, err := s.svc.Sandboxes.Move(r.Context(), p, r.PathValue("name"), req.Node)
	s.sandboxResult(w, r, http.StatusOK, sb, err)
}

// handleReceiveSnapshot keeps the body, the root of sandbox {id} (or its
// checkpoint {ck}, or that checkpoint's memory image) that the calling
// node is moving here (a node-only route), and answers 204 once it is
// all kept.
func (s sandboxes) handleReceiveSnapshot(w http.ResponseWriter, r *http.Request, _ sandbox.Principal) {
	memory := strings.HasSuffix(r.URL.Path, "/memory")
	if err := s.svc.Sandboxes.ReceiveSnapshot(r.Context(), door.FromNode(r), r.PathValue("id"), r.PathValue("ck"), memory, r.Body); err != nil {
		door.WriteError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleCordon cordons node {node} (PUT) or lifts its cordon (DELETE),
// and answers 204.
func (s sandboxes) handleCordon(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	if err := s.svc.Sandboxes.Cordon(r.Context(), p, r.PathValue("node"), r.Method == http.MethodPut); err != nil {
		door.WriteError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleSendLayer writes image layer {key}, as what it holds beyond the
// layer the query's base names, to the calling node, which lacks the
// image (a node-only route).
func (s images) handleSendLayer(w http.ResponseWriter, r *http.Request, _ sandbox.Principal) {
	rw := &startedWriter{w: w}
	if err := s.svc.Images.SendLayer(r.Context(), door.FromNode(r), r.PathValue("key"), r.URL.Query().Get("base"), rw); err != nil {
		if !rw.started {
			door.WriteError(w, r, err)
		}
		return
	}
}

// startedWriter is an octet stream's answer, started by its first byte:
// an error after it can only cut the stream, which its reader takes for
// a failed transfer.
type startedWriter struct {
	w       http.ResponseWriter
	started bool
}

func (s *startedWriter) Write(b []byte) (int, error) {
	if !s.started {
		s.started = true
		s.w.Header().Set("Content-Type", "application/octet-stream")
		s.w.WriteHeader(http.StatusOK)
	}
	return s.w.Write(b)
}
