package lifecycle_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/secrets"
)

const secretValue = "sk-live-7f3a9c2e51"

// secretsEnv is an env whose service keeps secrets.
func secretsEnv(t *testing.T) *env {
	box, err := secrets.New(bytes.Repeat([]byte{7}, secrets.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return newEnv(t, func(o *envOptions) { o.Secrets = box })
}

// TestSecrets: a tenant admin sets a secret; a command that names it gets
// it in its environment and its output comes back scrubbed; the store
// holds it sealed; nobody outside the tenant sees it.
func TestSecrets(t *testing.T) {
	e := secretsEnv(t)
	ctx := t.Context()
	_, err := e.svc.Credentials.SetSecret(ctx, a1, "", "API_KEY", []byte(secretValue))
	wantCode(t, "SetSecret as an agent", err, sandbox.CodePermissionDenied)
	info, err := e.svc.Credentials.SetSecret(ctx, admin, "", "API_KEY", []byte(secretValue))
	if err != nil || info.Tenant != "t1" || info.Name != "API_KEY" || !info.CreatedAt.Equal(epoch) {
		t.Fatalf("SetSecret as the tenant admin = %+v, %v", info, err)
	}
	sealed, err := e.db.Secrets().Get(ctx, "t1", "API_KEY")
	if err != nil || bytes.Contains(sealed, []byte(secretValue)) {
		t.Errorf("the store holds %q, %v; want the value sealed", sealed, err)
	}

	e.create(t, a1, "web")
	var out, errb bytes.Buffer
	res, err := e.svc.Processes.Exec(ctx, a1, "web", sandbox.ExecRequest{
		Shell:   `test "$API_KEY" = "` + secretValue + `" && echo match; echo "key=$API_KEY"; echo "err=$API_KEY" >&2`,
		Secrets: []string{"API_KEY"},
	}, nil, &out, &errb)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec with API_KEY = %+v, %v", res, err)
	}
	if out.String() != "match\nkey=[secret API_KEY]\n" || errb.String() != "err=[secret API_KEY]\n" {
		t.Errorf("stdout %q, stderr %q; want the value given to the command and scrubbed from its output", out.String(), errb.String())
	}
	// One command only: the next one has no such variable.
	if got, _ := e.exec(t, a1, "web", `echo "[$API_KEY]"`); got != "[]\n" {
		t.Errorf("the next command sees API_KEY = %q", got)
	}

	list, err := e.svc.Credentials.ListSecrets(ctx, a1, "")
	if err != nil || len(list) != 1 || list[0].Name != "API_KEY" {
		t.Errorf("ListSecrets as an agent of t1 = %+v, %v", list, err)
	}
	_, err = e.svc.Credentials.ListSecrets(ctx, b1, "t1")
	wantCode(t, "ListSecrets(t1) as an agent of t2", err, sandbox.CodeNotFound)
	e.create(t, b1, "theirs")
	_, err = e.svc.Processes.Exec(ctx, b1, "theirs", sandbox.ExecRequest{Shell: "true", Secrets: []string{"API_KEY"}}, nil, nil, nil)
	wantCode(t, "Exec in t2 naming t1's secret", err, sandbox.CodeNotFound)

	_, err = e.svc.Credentials.SetSecret(ctx, admin, "", "SHORT", []byte("abc"))
	wantCode(t, "SetSecret of 3 bytes", err, sandbox.CodeInvalidArgument)
	_, err = e.svc.Credentials.SetSecret(ctx, admin, "", "bad-name", []byte(secretValue))
	wantCode(t, "SetSecret(bad-name)", err, sandbox.CodeInvalidArgument)
	if err := e.svc.Credentials.DeleteSecret(ctx, admin, "", "API_KEY"); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.Processes.Exec(ctx, a1, "web", sandbox.ExecRequest{Shell: "true", Secrets: []string{"API_KEY"}}, nil, nil, nil)
	wantCode(t, "Exec naming a deleted secret", err, sandbox.CodeNotFound)
}

// TestSecretsOff: a daemon without a key refuses secrets, clearly.
func TestSecretsOff(t *testing.T) {
	e := newEnv(t, nil)
	_, err := e.svc.Credentials.SetSecret(t.Context(), admin, "", "API_KEY", []byte(secretValue))
	if se := wantCode(t, "SetSecret without a key", err, sandbox.CodeUnavailable); !strings.Contains(se.Message, "no secrets") {
		t.Errorf("SetSecret without a key = %v", se)
	}
}
