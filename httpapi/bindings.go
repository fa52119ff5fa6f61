package httpapi

import (
	"net/http"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/sandbox"
)

// bindingRequest is the body of PUT /v1/bindings/{binding}: the binding
// but its name (in the path), tenant (?tenant=) and times. header and
// format may be left out for their defaults.
type bindingRequest struct {
	Secret   string `json:"secret"`
	Upstream string `json:"upstream"`
	Header   string `json:"header"`
	Format   string `json:"format"`
}

type bindingList struct {
	Bindings []sandbox.Binding `json:"bindings"`
}

// handleSetBinding creates or replaces a binding of the tenant ?tenant=
// (the caller's by default) and answers it as stored.
func (s admin) handleSetBinding(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	var req bindingRequest
	if err := s.decode(w, r, &req); err != nil {
		door.WriteError(w, r, err)
		return
	}
	example := `{"secret":"OPENAI_API_KEY","upstream":"https://api.openai.com/v1"}`
	err := required("secret", req.Secret, example)
	if err == nil {
		err = required("upstream", req.Upstream, example)
	}
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	b, err := s.svc.Credentials.SetBinding(r.Context(), p, r.URL.Query().Get("tenant"), sandbox.Binding{
		Name: r.PathValue("binding"), Secret: req.Secret, Upstream: req.Upstream, Header: req.Header, Format: req.Format,
	})
	s.reply(w, r, http.StatusOK, b, err)
}

func (s admin) handleListBindings(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	list, err := s.svc.Credentials.ListBindings(r.Context(), p, r.URL.Query().Get("tenant"))
	s.reply(w, r, http.StatusOK, bindingList{Bindings: list}, err)
}

func (s admin) handleDeleteBinding(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	if err := s.svc.Credentials.DeleteBinding(r.Context(), p, r.URL.Query().Get("tenant"), r.PathValue("binding")); err != nil {
		door.WriteError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
