package spritesapi_test

import (
	"bytes"
	"crypto/rand"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hearth/hearth/testutil/daemontest"
)

// fsURL is the path of filesystem endpoint op of sprite box with q.
func fsURL(op string, q url.Values) string { return "/v1/sprites/box/fs/" + op + "?" + q.Encode() }

// The filesystem API as the SDKs use it: write with parents and a mode,
// read back byte for byte, list with metadata, stat through list, a mode
// kept across a rewrite without one, rename, chmod, delete, and errors
// with errno and path. Under driver/fake an absolute path is a host path,
// so the sandbox's home is the host directory home (whose path stands in
// for /home/sandbox); that .. cannot leave a real sandbox is the agent's
// to enforce, and the e2e tests check it through this door.
func TestFiles(t *testing.T) {
	e := newEnv(t, daemontest.Options{})
	e.create(t, tok, "box")
	home := e.d.Home(t, daemontest.AgentA1, "box")

	data := make([]byte, 1<<20)
	rand.Read(data)
	var wr struct {
		Path string `json:"path"`
		Size int64  `json:"size"`
		Mode string `json:"mode"`
	}
	e.want(t, http.StatusOK, "PUT", fsURL("write", url.Values{"path": {"deep/er/blob"}, "workingDir": {home}, "mode": {"0600"}, "mkdirParents": {"true"}}), tok, string(data), &wr)
	if wr.Path != home+"/deep/er/blob" || wr.Size != 1<<20 || wr.Mode != "0600" {
		t.Errorf("write = %+v", wr)
	}
	got := e.want(t, http.StatusOK, "GET", fsURL("read", url.Values{"path": {home + "/deep/er/blob"}}), tok, "", nil)
	if !bytes.Equal(got, data) {
		t.Errorf("read back %d bytes, not the 1 MiB written", len(got))
	}

	// A script written 0755 keeps its mode when rewritten without one.
	script := url.Values{"path": {"run.sh"}, "workingDir": {home}, "mode": {"0755"}}
	e.want(t, http.StatusOK, "PUT", fsURL("write", script), tok, "#!/bin/sh\necho one\n", nil)
	script.Del("mode")
	e.want(t, http.StatusOK, "PUT", fsURL("write", script), tok, "#!/bin/sh\necho two\n", &wr)
	if wr.Mode != "0755" {
		t.Errorf("rewritten script mode %s, want 0755 kept", wr.Mode)
	}
	if r := e.dial(t, "box", cmd("sh", "-c", "./run.sh")).run(t, false); r.stdout.String() != "two\n" {
		t.Errorf("running the script: %q exit %d, stderr %q, close %d", r.stdout.String(), r.exit, r.stderr.String(), r.closeCode)
	}
	// mkdir as the SDKs emulate it: write dir/.keep, delete it.
	e.want(t, http.StatusOK, "PUT", fsURL("write", url.Values{"path": {home + "/made/.keep"}, "mkdir": {"true"}}), tok, "", nil)
	e.want(t, http.StatusOK, "DELETE", fsURL("delete", url.Values{"path": {home + "/made/.keep"}}), tok, "", nil)

	type entry struct {
		Name, Path, Type, Mode, ModTime string
		Size                            int64
		IsDir                           bool
	}
	var list struct {
		Path    string
		Count   int
		Entries []entry
	}
	e.want(t, http.StatusOK, "GET", fsURL("list", url.Values{"path": {home}}), tok, "", &list)
	var names []string
	for _, en := range list.Entries {
		names = append(names, en.Name)
	}
	if strings.Join(names, ",") != "deep,made,run.sh" || list.Count != 3 {
		t.Errorf("list = %q (count %d); want directories first, then files, by name", names, list.Count)
	}
	if en := list.Entries[2]; en.Type != "file" || en.Mode != "0755" || en.Size != int64(len("#!/bin/sh\necho two\n")) || en.IsDir || en.ModTime == "" || en.Path != home+"/run.sh" {
		t.Errorf("run.sh entry %+v", en)
	}
	if en := list.Entries[0]; en.Type != "directory" || !en.IsDir {
		t.Errorf("deep entry %+v", en)
	}
	e.want(t, http.StatusOK, "GET", fsURL("list", url.Values{"path": {"run.sh"}, "workingDir": {home}}), tok, "", &list)
	if len(list.Entries) != 1 || list.Entries[0].Name != "run.sh" {
		t.Errorf("list of a file = %+v; want that file", list.Entries)
	}
	e.want(t, http.StatusOK, "GET", fsURL("list", url.Values{"path": {home + "/deep"}, "recursive": {"true"}}), tok, "", &list)
	if len(list.Entries) != 2 || list.Entries[1].Path != home+"/deep/er/blob" {
		t.Errorf("recursive list = %+v", list.Entries)
	}

	e.want(t, http.StatusOK, "POST", "/v1/sprites/box/fs/rename", tok, `{"source":"run.sh","dest":"go.sh","workingDir":"`+home+`"}`, nil)
	e.want(t, http.StatusOK, "POST", "/v1/sprites/box/fs/chmod", tok, `{"path":"`+home+`/deep","mode":"0700","recursive":true}`, nil)
	for _, p := range []string{"go.sh", "deep", "deep/er", "deep/er/blob"} {
		fi, err := os.Stat(filepath.Join(home, p))
		want := os.FileMode(0o700)
		if p == "go.sh" {
			want = 0o755
		}
		if err != nil {
			t.Errorf("stat %s: %v", p, err)
		} else if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v; want %v", p, fi.Mode(), want)
		}
	}

	ae := e.wantError(t, http.StatusBadRequest, "ENOTEMPTY", "DELETE", fsURL("delete", url.Values{"path": {home + "/deep"}}), tok, "")
	if ae.Path != home+"/deep" {
		t.Errorf("ENOTEMPTY error path %q", ae.Path)
	}
	var del struct {
		Deleted []string
		Count   int
	}
	e.want(t, http.StatusOK, "DELETE", "/v1/sprites/box/fs/delete", tok, `{"path":"deep","workingDir":"`+home+`","recursive":true}`, &del)
	if del.Count != 1 || len(del.Deleted) != 1 || del.Deleted[0] != home+"/deep" {
		t.Errorf("delete = %+v", del)
	}
	ae = e.wantError(t, http.StatusNotFound, "ENOENT", "GET", fsURL("read", url.Values{"path": {home + "/deep/er/blob"}}), tok, "")
	if ae.Path != home+"/deep/er/blob" || ae.Error == "" {
		t.Errorf("ENOENT error %+v; want the path and a message", ae)
	}
	e.wantError(t, http.StatusNotFound, "ENOENT", "DELETE", fsURL("delete", url.Values{"path": {home + "/deep"}}), tok, "")
	e.wantError(t, http.StatusBadRequest, "EISDIR", "GET", fsURL("read", url.Values{"path": {home + "/made"}}), tok, "")
	e.wantError(t, http.StatusNotFound, "ENOENT", "PUT", fsURL("write", url.Values{"path": {home + "/no/such/dir/f"}, "mkdirParents": {"false"}}), tok, "x")
	e.wantError(t, http.StatusBadRequest, "invalid_argument", "PUT", fsURL("write", url.Values{"path": {home + "/f"}, "mode": {"9z"}}), tok, "x")
	e.wantError(t, http.StatusBadRequest, "invalid_argument", "GET", fsURL("read", nil), tok, "")
}

// Writes over the daemon's limit are refused whole.
func TestFilesTooLarge(t *testing.T) {
	e := newEnv(t, daemontest.Options{MaxWriteBytes: 1024})
	e.create(t, tok, "box")
	home := e.d.Home(t, daemontest.AgentA1, "box")
	e.wantError(t, http.StatusRequestEntityTooLarge, "EFBIG", "PUT", fsURL("write", url.Values{"path": {home + "/big"}}), tok, strings.Repeat("x", 2048))
	e.wantError(t, http.StatusNotFound, "ENOENT", "GET", fsURL("read", url.Values{"path": {home + "/big"}}), tok, "")
}
