package httpapi

import (
	"net/http"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/sandbox"
)

// checkpointRequest is the body of POST .../checkpoints; an empty body
// takes a checkpoint without a label.

// restoreRequest is the body of POST .../restore.
type restoreRequest struct {
	Checkpoint string `json:"checkpoint"`
}

// forkRequest is the body of POST .../fork.
type forkRequest struct {
	Checkpoint string `json:"checkpoint"`
	Name       string `json:"name"`
}

// checkpointList is the body of GET .../checkpoints.
type checkpointList struct {
	Checkpoints []sandbox.Checkpoint `json:"checkpoints"`
}

// handleCheckpoint answers 201 with the checkpoint taken of the sandbox.
func (s sandboxes) handleCheckpoint(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	var req sandbox.CheckpointRequest
	if err := s.decode(w, r, &req); err != nil {
		door.WriteError(w, r, err)
		return
	}
	c, err := s.svc.Checkpoints.Checkpoint(r.Context(), p, r.PathValue("name"), req)
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	s.encode(w, http.StatusCreated, c)
}

func (s sandboxes) handleListCheckpoints(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	list, err := s.svc.Checkpoints.ListCheckpoints(r.Context(), p, r.PathValue("name"))
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	if list == nil {
		list = []sandbox.Checkpoint{}
	}
	s.encode(w, http.StatusOK, checkpointList{Checkpoints: list})
}

func (s sandboxes) handleDeleteCheckpoint(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	if err := s.svc.Checkpoints.DeleteCheckpoint(r.Context(), p, r.PathValue("name"), r.PathValue("id")); err != nil {
		door.WriteError(w, r, err)
		return
	}
	s.encode(w, http.StatusNoContent, nil)
}

func (s sandboxes) handleRestore(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	var req restoreRequest
	err := s.decode(w, r, &req)
	if err == nil {
		err = required("checkpoint", req.Checkpoint, `{"checkpoint":"<id>"}`)
	}
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	sb, err := s.svc.Checkpoints.Restore(r.Context(), p, r.PathValue("name"), req.Checkpoint)
	s.sandboxResult(w, r, http.StatusOK, sb, err)
}

// handleFork answers 201 with the new sandbox.
func (s sandboxes) handleFork(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	var req forkRequest
	err := s.decode(w, r, &req)
	const example = `{"checkpoint":"<id>","name":"<new sandbox name>"}`
	if err == nil {
		err = required("checkpoint", req.Checkpoint, example)
	}
	if err == nil {
		err = required("name", req.Name, example)
	}
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	sb, err := s.svc.Checkpoints.Fork(r.Context(), p, r.PathValue("name"), req.Checkpoint, req.Name)
	s.sandboxResult(w, r, http.StatusCreated, sb, err)
}

func (s sandboxes) handleSleep(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	sb, err := s.svc.Sandboxes.Sleep(r.Context(), p, r.PathValue("name"))
	s.sandboxResult(w, r, http.StatusOK, sb, err)
}

func (s sandboxes) handleWake(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	sb, err := s.svc.Sandboxes.Wake(r.Context(), p, r.PathValue("name"))
	s.sandboxResult(w, r, http.StatusOK, sb, err)
}

// sandboxResult answers the Sandbox result of an operation with status, or its
// error.
func (s sandboxes) sandboxResult(w http.ResponseWriter, r *http.Request, status int, sb sandbox.Sandbox, err error) {
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	s.encode(w, status, sb)
}
