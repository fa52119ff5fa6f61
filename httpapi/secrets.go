package httpapi

import (
	"net/http"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/sandbox"
)

// secretValue is the body of PUT /v1/secrets/{name}.
type secretValue struct {
	Value string `json:"value"`
}

type secretList struct {
	Secrets []sandbox.SecretInfo `json:"secrets"`
}

// handleSetSecret stores a secret of the tenant ?tenant= (the caller's by
// default) and answers its description, never its value.
func (s admin) handleSetSecret(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	var v secretValue
	if err := s.decode(w, r, &v); err != nil {
		door.WriteError(w, r, err)
		return
	}
	info, err := s.svc.Credentials.SetSecret(r.Context(), p, r.URL.Query().Get("tenant"), r.PathValue("secret"), []byte(v.Value))
	s.reply(w, r, http.StatusOK, info, err)
}

func (s admin) handleListSecrets(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	list, err := s.svc.Credentials.ListSecrets(r.Context(), p, r.URL.Query().Get("tenant"))
	s.reply(w, r, http.StatusOK, secretList{Secrets: list}, err)
}

func (s admin) handleDeleteSecret(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	if err := s.svc.Credentials.DeleteSecret(r.Context(), p, r.URL.Query().Get("tenant"), r.PathValue("secret")); err != nil {
		door.WriteError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
