package httpapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/testenv"
)

func TestFiles(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.create(t, "files")
	c := e.client()
	ctx := t.Context()

	content := bytes.Repeat([]byte("hearth\x00\xff"), 100_000)
	info, err := c.WriteFile(ctx, "files", sandbox.WriteRequest{Path: "deep/dir/blob.bin", Parents: true, Mode: 0o600, SetMode: true}, bytes.NewReader(content))
	if err != nil || info.Size != int64(len(content)) || info.Mode.Perm() != 0o600 {
		t.Fatalf("WriteFile = %+v, %v", info, err)
	}
	if got, err := os.ReadFile(filepath.Join(e.home(t, "files"), "deep/dir/blob.bin")); err != nil || !bytes.Equal(got, content) {
		t.Fatalf("the agent stored %d bytes, %v; want %d", len(got), err, len(content))
	}
	var back bytes.Buffer
	if err := c.ReadFile(ctx, "files", "deep/dir/blob.bin", &back); err != nil || !bytes.Equal(back.Bytes(), content) {
		t.Fatalf("ReadFile = %d bytes, %v; want the content back", back.Len(), err)
	}
	if err := c.ReadFile(ctx, "files", "empty", &back); !sandbox.IsCode(err, sandbox.CodeNotFound) {
		t.Fatalf("ReadFile(missing) = %v; want not_found", err)
	}
	if _, err := c.WriteFile(ctx, "files", sandbox.WriteRequest{Path: "empty"}, nil); err != nil {
		t.Fatal(err)
	}
	back.Reset()
	if err := c.ReadFile(ctx, "files", "empty", &back); err != nil || back.Len() != 0 {
		t.Fatalf("ReadFile(empty) = %q, %v", back.String(), err)
	}

	if info, err := c.Mkdir(ctx, "files", "a/b"); err != nil || info.Type != sandbox.FileDir {
		t.Fatalf("Mkdir = %+v, %v", info, err)
	}
	if info, err := c.Rename(ctx, "files", "empty", "a/b/moved"); err != nil || info.Name != "moved" {
		t.Fatalf("Rename = %+v, %v", info, err)
	}
	if info, err := c.Chmod(ctx, "files", "a/b/moved", 0o755|fs.ModeSetgid); err != nil || info.Mode != 0o755|fs.ModeSetgid {
		t.Fatalf("Chmod(02755) = %+v (mode %v), %v", info, info.Mode, err)
	}
	if info, err := c.Stat(ctx, "files", "a/b/moved"); err != nil || info.Type != sandbox.FileRegular {
		t.Fatalf("Stat = %+v, %v", info, err)
	}
	list, err := c.ListDir(ctx, "files", "a/b")
	if err != nil || len(list) != 1 || list[0].Name != "moved" {
		t.Fatalf("ListDir = %+v, %v", list, err)
	}
	if err := c.Remove(ctx, "files", "a", false); err == nil {
		t.Fatal("Remove of a non-empty directory without recursive succeeded")
	}
	if err := c.Remove(ctx, "files", "a", true); err != nil {
		t.Fatalf("Remove(recursive) = %v", err)
	}
	if _, err := c.Stat(ctx, "files", "a"); !sandbox.IsCode(err, sandbox.CodeNotFound) {
		t.Fatalf("Stat after Remove = %v; want not_found", err)
	}
	// The lists of an empty directory is [], not null.
	resp, body := testenv.Do(t, "GET", e.url+"/v1/sandboxes/files/fs/list?path=deep/dir/../../deep", tokenA1, "")
	var entries struct{ Entries json.RawMessage }
	if resp.StatusCode != 200 || json.Unmarshal(body, &entries) != nil || len(entries.Entries) == 0 || entries.Entries[0] != '[' {
		t.Fatalf("list = %d %s", resp.StatusCode, body)
	}
}

func TestFileErrors(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.create(t, "files")
	os.WriteFile(filepath.Join(e.home(t, "files"), "f"), []byte("x"), 0o644)
	base := e.url + "/v1/sandboxes/files/fs/"
	tests := []struct {
		method, url string
		code        sandbox.Code
		mention     string
	}{
		{"GET", base + "file", sandbox.CodeInvalidArgument, `"path"`},
		{"GET", base + "file?path=", sandbox.CodeInvalidArgument, `"path"`},
		{"GET", base + "file?path=f&paht=g", sandbox.CodeInvalidArgument, `"paht"`},
		{"GET", base + "file?path=f&path=g", sandbox.CodeInvalidArgument, "2 times"},
		{"GET", base + "file?path=%zz", sandbox.CodeInvalidArgument, "query"},
		{"GET", base + "file?path=nosuch", sandbox.CodeNotFound, "nosuch"},
		{"GET", base + "file?path=.", sandbox.CodeInvalidArgument, "directory"},
		{"GET", e.url + "/v1/sandboxes/nosuch/fs/file?path=f", sandbox.CodeNotFound, "nosuch"},
		{"PUT", base + "file?path=g&mode=999", sandbox.CodeInvalidArgument, "999"},
		{"PUT", base + "file?path=g&mode=17777", sandbox.CodeInvalidArgument, "17777"},
		{"PUT", base + "file?path=g&parents=maybe", sandbox.CodeInvalidArgument, "maybe"},
		{"PUT", base + "file?path=g&max_bytes=-1", sandbox.CodeInvalidArgument, "-1"},
		{"POST", base + "chmod?path=f", sandbox.CodeInvalidArgument, `"mode"`},
		{"POST", base + "rename?from=f", sandbox.CodeInvalidArgument, `"to"`},
		{"DELETE", base + "file?path=f&recursive=yes", sandbox.CodeInvalidArgument, "yes"},
		{"GET", base + "list?path=f", sandbox.CodeInvalidArgument, "not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+strings.TrimPrefix(tt.url, e.url), func(t *testing.T) {
			resp, body := testenv.Do(t, tt.method, tt.url, tokenA1, "")
			got := errorOf(t, resp, body)
			if got.Code != tt.code || !strings.Contains(got.Message, tt.mention) {
				t.Fatalf("= %d %s; want %s naming %s", resp.StatusCode, body, tt.code, tt.mention)
			}
			if tt.code == sandbox.CodeInvalidArgument && got.Hint == "" {
				t.Errorf("invalid_argument without a hint: %s", body)
			}
		})
	}
}

// TestWriteTooLargeBeforeReading sends only the headers of an oversized
// write: the answer must come without the body being read.
func TestWriteTooLargeBeforeReading(t *testing.T) {
	e := newEnv(t, envOptions{maxWrite: 1000})
	e.create(t, "files")
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "PUT /v1/sandboxes/files/fs/file?path=big HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 5000000\r\n\r\n", tokenA1)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer before the body was sent: %v", err)
	}
	defer resp.Body.Close()
	var body struct{ Error sandbox.Error }
	json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || body.Error.Code != sandbox.CodeTooLarge ||
		body.Error.Details["max_bytes"] != 1000.0 || body.Error.Details["size"] != 5e6 {
		t.Fatalf("= %d %+v; want 413 too_large with max_bytes 1000 and size 5000000", resp.StatusCode, body.Error)
	}
	if _, err := os.Stat(filepath.Join(e.home(t, "files"), "big")); !os.IsNotExist(err) {
		t.Errorf("a refused write left a file: %v", err)
	}
}

func TestWriteTooLarge(t *testing.T) {
	e := newEnv(t, envOptions{maxWrite: 1000})
	e.create(t, "files")
	c := e.client()
	if _, err := c.WriteFile(t.Context(), "files", sandbox.WriteRequest{Path: "keep"}, strings.NewReader("original")); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]interface{ Read([]byte) (int, error) }{
		"with Content-Length":  strings.NewReader(strings.Repeat("x", 1001)),
		"large, expecting 100": bytes.NewReader(make([]byte, 8<<20)),
		"chunked":              bufio.NewReader(strings.NewReader(strings.Repeat("x", 5000))),
	} {
		_, err := c.WriteFile(t.Context(), "files", sandbox.WriteRequest{Path: "keep"}, r)
		if !sandbox.IsCode(err, sandbox.CodeTooLarge) {
			t.Errorf("WriteFile(%s, over the limit) = %v; want too_large", name, err)
		}
	}
	// A caller may ask for a lower limit than the daemon's.
	_, err := c.WriteFile(t.Context(), "files", sandbox.WriteRequest{Path: "keep", MaxBytes: 10}, strings.NewReader("eleven byte"))
	if !sandbox.IsCode(err, sandbox.CodeTooLarge) {
		t.Errorf("WriteFile(11 bytes, MaxBytes 10) = %v; want too_large", err)
	}
	if got, _ := os.ReadFile(filepath.Join(e.home(t, "files"), "keep")); string(got) != "original" {
		t.Fatalf("after refused writes the file holds %q; want it untouched", got)
	}
}
