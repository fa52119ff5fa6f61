package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hearth/hearth/secrets"
)

// TestKeyCreate: `hearth key create FILE` writes a key secrets.Load opens
// (mode 0600, nothing else left in the directory), refuses an existing
// FILE with a non-zero exit and the file unchanged, and replaces it with
// --force; what a Box of the new key seals, a Box loaded from the file
// opens.
func TestKeyCreate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "deploy.key")
	hearth := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := run(t.Context(), append([]string{"key"}, args...), func(string) string { return "" }, nil, &out, &errb)
		return out.String(), errb.String(), code
	}

	out, errs, code := hearth("create", path)
	if code != 0 || !strings.Contains(out, path) || !strings.Contains(out, "--key-file") {
		t.Fatalf("key create FILE = %d, %q, %q; want 0 and a line naming the file and --key-file", code, out, errs)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != secrets.KeySize {
		t.Fatalf("key file = %v, %v; want mode 0600 and %d bytes", fi, err, secrets.KeySize)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the directory holds %d files, want the key file alone", len(ents))
	}
	first, _ := os.ReadFile(path)
	box, err := secrets.Load(path)
	if err != nil {
		t.Fatalf("secrets.Load(the new key file) = %v", err)
	}
	sealed := box.Seal("acme", "OPENAI_API_KEY", []byte("sk-1"))
	if again, err := secrets.Load(path); err != nil {
		t.Fatal(err)
	} else if got, err := again.Open("acme", "OPENAI_API_KEY", sealed); err != nil || string(got) != "sk-1" {
		t.Errorf("Open with the key file loaded again = %q, %v; want sk-1", got, err)
	}

	// An existing file is refused, and left as it was.
	out, errs, code = hearth("create", path)
	if code == 0 || out != "" || !strings.Contains(errs, "error: key file "+path+" exists") || !strings.Contains(errs, "--force") {
		t.Errorf("key create (existing) = %d, %q, %q; want a non-zero exit, an error naming the file and a hint of --force", code, out, errs)
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now, first) {
		t.Errorf("a refused key create changed the key file")
	}

	// --force replaces it: the old key's seals no longer open.
	out, errs, code = hearth("create", path, "--force", "--json")
	var res struct {
		KeyFile string `json:"key_file"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.KeyFile != path {
		t.Fatalf("key create --force --json = %d, %q, %q; want 0 and {\"key_file\": %q}", code, out, errs, path)
	}
	if now, _ := os.ReadFile(path); len(now) != secrets.KeySize || bytes.Equal(now, first) {
		t.Errorf("after --force the file holds %d bytes, the old key: %v; want a new key", len(now), bytes.Equal(now, first))
	}
	box, err = secrets.Load(path)
	if err != nil {
		t.Fatalf("secrets.Load(the replaced key file) = %v", err)
	}
	if _, err := box.Open("acme", "OPENAI_API_KEY", sealed); err == nil {
		t.Errorf("the new key opens what the old one sealed")
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("replaced key file = %v, %v; want mode 0600", fi, err)
	}

	// No FILE is a usage error.
	if _, errs, code := hearth("create"); code != exitUsage || !strings.Contains(errs, "missing FILE") {
		t.Errorf("key create (no FILE) = %d, %q; want %d and missing FILE", code, errs, exitUsage)
	}
}
