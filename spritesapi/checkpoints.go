package spritesapi

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/sandbox"
)

// checkpoint is the Sprites object of one checkpoint. hearth's checkpoint
// ids are the ids; the label is the comment; create_time is always there
// (the Python SDK's list parser needs it).
type checkpoint struct {
	ID         string `json:"id"`
	CreateTime stamp  `json:"create_time"`
	SourceID   string `json:"source_id,omitempty"`
	Comment    string `json:"comment,omitempty"`
	IsAuto     bool   `json:"is_auto"`
	SizeBytes  int64  `json:"size_bytes"`
}

func checkpointOf(c sandbox.Checkpoint) checkpoint {
	return checkpoint{ID: c.ID, CreateTime: stamp(c.CreatedAt), SourceID: c.Parent, Comment: c.Label,
		IsAuto: c.Auto(), SizeBytes: c.SizeBytes}
}

// event is one line of a checkpoint or restore stream.
type event struct {
	Type  string `json:"type"`
	Data  string `json:"data,omitempty"`
	Error string `json:"error,omitempty"`
	Time  stamp  `json:"time"`
}

// eventStream writes NDJSON events, each flushed as it is written.
type eventStream struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// startEvents answers 200 and returns the stream.
func startEvents(w http.ResponseWriter) *eventStream {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	return &eventStream{w: w, rc: http.NewResponseController(w)}
}

func (s *eventStream) send(e event) {
	e.Time = stamp(time.Now())
	b, _ := json.Marshal(e)
	s.w.Write(append(b, '\n'))
	s.rc.Flush()
}

// fail ends a stream with an error event, and records its code.
func (s *eventStream) fail(r *http.Request, what string, err error) {
	e := sandbox.AsError(err)
	door.NoteCode(r, e.Code)
	s.send(event{Type: "error", Error: what + " failed: " + e.Error()})
}

// checkpointRequest is the body of POST .../checkpoint; comment may come in
// the query instead.
type checkpointRequest struct {
	Comment string `json:"comment"`
}

// handleCheckpoint takes a live checkpoint and streams its progress. The
// new id reaches a Sprites client only in the complete event's text
// ("Checkpoint <id> created successfully"), as on Sprites.
func (d *server) handleCheckpoint(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
	var req checkpointRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if c := r.URL.Query().Get("comment"); c != "" && req.Comment == "" {
		req.Comment = c
	}
	name := r.PathValue("name")
	if err := sandbox.ValidateLabel(req.Comment); err != nil {
		return err
	}
	s := startEvents(w)
	s.send(event{Type: "info", Data: "Creating checkpoint..."})
	c, err := d.svc.Checkpoints.Checkpoint(r.Context(), p, name, sandbox.CheckpointRequest{Label: req.Comment})
	if err != nil {
		s.fail(r, "Checkpoint", err)
		return nil
	}
	s.send(event{Type: "complete", Data: "Checkpoint " + c.ID + " created successfully"})
	return nil
}

// handleListCheckpoints answers the sandbox's checkpoints, oldest first, as
// a JSON array; hearth's automatic ones only with includeAuto=true.
func (d *server) handleListCheckpoints(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
	withAuto, err := boolParam(r.URL.Query(), "includeAuto", false)
	if err != nil {
		return err
	}
	list, err := d.svc.Checkpoints.ListCheckpoints(r.Context(), p, r.PathValue("name"))
	if err != nil {
		return err
	}
	out := []checkpoint{}
	for _, c := range list {
		if withAuto || !c.Auto() {
			out = append(out, checkpointOf(c))
		}
	}
	encode(w, http.StatusOK, out)
	return nil
}

func (d *server) handleGetCheckpoint(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
	c, err := d.findCheckpoint(r, p)
	if err != nil {
		return err
	}
	encode(w, http.StatusOK, checkpointOf(c))
	return nil
}

// findCheckpoint returns the checkpoint {id} of the sprite {name} of r,
// or not_found.
func (d *server) findCheckpoint(r *http.Request, p sandbox.Principal) (sandbox.Checkpoint, error) {
	name, id := r.PathValue("name"), r.PathValue("id")
	list, err := d.svc.Checkpoints.ListCheckpoints(r.Context(), p, name)
	if err != nil {
		return sandbox.Checkpoint{}, err
	}
	for _, c := range list {
		if c.ID == id {
			return c, nil
		}
	}
	return sandbox.Checkpoint{}, sandbox.Errorf(sandbox.CodeNotFound, "checkpoint %q of sprite %q not found", id, name).
		WithHint("list the sprite's checkpoints")
}

// handleRestore restores the checkpoint and streams its progress: the
// sandbox's processes are stopped (ending its exec sessions), its files
// become the checkpoint's, and it runs again before the complete event.
func (d *server) handleRestore(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
	if _, err := d.findCheckpoint(r, p); err != nil {
		return err // before the stream starts: a plain 404
	}
	name, id := r.PathValue("name"), r.PathValue("id")
	s := startEvents(w)
	s.send(event{Type: "info", Data: "Restoring checkpoint " + id + "..."})
	if _, err := d.svc.Checkpoints.Restore(r.Context(), p, name, id); err != nil {
		s.fail(r, "Restore", err)
		return nil
	}
	s.send(event{Type: "complete", Data: "Checkpoint " + id + " restored successfully"})
	return nil
}
