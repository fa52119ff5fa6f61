package attack_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/driver/oci"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/secrets"
	"github.com/hearth/hearth/testutil/daemonproc"
	"github.com/hearth/hearth/testutil/testenv"
)

// TestSecretNotInMemoryImage (runsc): a tenant that has a command given a
// secret and then takes a memory checkpoint of its sandbox finds the
// secret's value nowhere under the data dir: not in the image's files
// (sealed), not in any other file, in plaintext, base64 or hex. Opened
// with the data dir's key, the image (the sandbox's whole memory once the
// command has ended) holds no copy of the value either: the agent kept
// none (see agent's secretenv.go), and gVisor zeroes the memory of
// processes that ended before it saves.
func TestSecretNotInMemoryImage(t *testing.T) {
	b := daemonproc.Require(t)
	if !slices.Contains(b.Runtimes, "runsc") {
		testenv.Skip(t, "memory checkpoints need runsc, which is not installed")
	}
	d := daemonproc.New(t, "runsc")
	tok := tenantToken(t, d, "mallory")
	ctx := ctxT(t)
	raw := make([]byte, 36)
	rand.Read(raw)
	value := base64.RawURLEncoding.EncodeToString(raw) // 48 bytes
	if _, err := d.Client().Admin().SetSecret(ctx, "mallory", "K", value); err != nil {
		t.Fatal(err)
	}
	c := client.New(d.URL, tok, nil)
	if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "box"}); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(value))
	out, errOut, code := d.CLIAs(tok, "", "exec", "box", "--secret", "K", "--shell", "--", `printf %s "$K" | sha256sum | cut -c1-64`)
	if code != 0 || out != hex.EncodeToString(sum[:])+"\n" {
		t.Fatalf("exec --secret K = %d %q %q; want the value's hash, computed inside", code, out, errOut)
	}
	ck, err := c.Checkpoint(ctx, "box", sandbox.CheckpointRequest{Memory: true})
	if err != nil || !ck.Memory {
		t.Fatalf("Checkpoint(memory) = %+v, %v", ck, err)
	}
	image := d.MemoryImage(ck.ID) // sealed, its tmpfs gone

	needles := map[string][]byte{
		"plaintext": []byte(value),
		"base64":    []byte(base64.StdEncoding.EncodeToString([]byte(value))),
		"hex":       []byte(hex.EncodeToString([]byte(value))),
	}
	files := 0
	err = filepath.WalkDir(d.DataDir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return nil // gone meanwhile; a socket, a device
		}
		f, err := os.Open(path)
		if err != nil {
			return nil
		}
		defer f.Close()
		files++
		for _, what := range sparseFind(f, needles) {
			t.Errorf("the secret's value (%s) is on disk in %s", what, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sealed, _ := os.ReadDir(image)
	if len(sealed) == 0 {
		t.Fatalf("no memory image at %s", image)
	}
	t.Logf("searched %d files under the data dir, the image's %d among them", files, len(sealed))

	box, err := secrets.LoadOrCreate(filepath.Join(d.DataDir, "secrets.key"))
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	imageBytes := 0
	if err := oci.OpenMemoryImage(image, ck.ID, box, func(name string, r io.Reader) error {
		b, err := io.ReadAll(r)
		imageBytes += len(b)
		for what, needle := range needles {
			counts[what] += bytes.Count(b, needle)
		}
		return err
	}); err != nil {
		t.Fatalf("open the image with the data dir's key: %v", err)
	}
	t.Logf("the opened image (%d bytes) holds the value %d times in plaintext, %d in base64, %d in hex", imageBytes, counts["plaintext"], counts["base64"], counts["hex"])
	for what, n := range counts {
		if n != 0 {
			t.Errorf("the sandbox's memory image holds %d copies of the secret's value (%s)", n, what)
		}
	}

	// The search finds a secret that is still in memory: one in the
	// environment of a process left running.
	if _, err := d.Client().Admin().SetSecret(ctx, "mallory", "P", value+"-probe"); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := d.CLIAs(tok, "", "exec", "box", "--secret", "P", "--shell", "--", "sleep 100000 >/dev/null 2>&1 &"); code != 0 {
		t.Fatalf("exec --secret P = %d %q", code, errOut)
	}
	ck2, err := c.Checkpoint(ctx, "box", sandbox.CheckpointRequest{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	probes := 0
	if err := oci.OpenMemoryImage(d.MemoryImage(ck2.ID), ck2.ID, box, func(name string, r io.Reader) error {
		b, err := io.ReadAll(r)
		probes += bytes.Count(b, []byte(value+"-probe"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if probes == 0 {
		t.Errorf("the image of a sandbox whose process holds a secret in its environment does not hold it: the search above proves nothing")
	}
}

// sparseFind returns which of needles the data of f holds (its extents
// between holes, as SEEK_DATA and SEEK_HOLE find them: the layer store's
// sparse backing file is mostly holes), reading 1 MiB at a time with an
// overlap so that a value across two reads is found.
func sparseFind(f *os.File, needles map[string][]byte) []string {
	const seekData, seekHole = 3, 4
	longest := 0
	for _, n := range needles {
		longest = max(longest, len(n))
	}
	buf := make([]byte, 1<<20+longest)
	found := map[string]bool{}
	for off := int64(0); ; {
		data, err := f.Seek(off, seekData)
		if err != nil {
			break
		}
		hole, err := f.Seek(data, seekHole)
		if err != nil || hole <= data {
			break
		}
		for pos := data; pos < hole; pos += 1 << 20 {
			n, _ := f.ReadAt(buf[:min(int64(len(buf)), hole-pos)], pos)
			for what, needle := range needles {
				if bytes.Contains(buf[:n], needle) {
					found[what] = true
				}
			}
		}
		off = hole
	}
	return slices.Sorted(maps.Keys(found))
}
