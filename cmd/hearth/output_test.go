package main

import (
	"bytes"
	"io/fs"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
)

func TestFormatMode(t *testing.T) {
	tests := []struct {
		typ  sandbox.FileType
		mode fs.FileMode
		want string
	}{
		{sandbox.FileRegular, 0o644, "-rw-r--r--"},
		{sandbox.FileDir, 0o755, "drwxr-xr-x"},
		{sandbox.FileSymlink, 0o777, "lrwxrwxrwx"},
		{sandbox.FileOther, 0o600, "?rw-------"},
		{sandbox.FileRegular, 0o755 | fs.ModeSetuid, "-rwsr-xr-x"},
		{sandbox.FileRegular, 0o644 | fs.ModeSetuid, "-rwSr--r--"},
		{sandbox.FileDir, 0o2775&0o777 | fs.ModeSetgid, "drwxrwsr-x"},
		{sandbox.FileDir, 0o777 | fs.ModeSticky, "drwxrwxrwt"},
		{sandbox.FileDir, 0o776 | fs.ModeSticky, "drwxrwxrwT"},
	}
	for _, tt := range tests {
		if got := formatMode(tt.typ, tt.mode); got != tt.want {
			t.Errorf("formatMode(%s, %o) = %q, want %q", tt.typ, tt.mode, got, tt.want)
		}
	}
}

func TestParseMode(t *testing.T) {
	tests := []struct {
		in    string
		want  fs.FileMode
		octal string
	}{
		{"644", 0o644, "0644"},
		{"0755", 0o755, "0755"},
		{"0o700", 0o700, "0700"},
		{"4755", 0o755 | fs.ModeSetuid, "4755"},
		{"2775", 0o775 | fs.ModeSetgid, "2775"},
		{"1777", 0o777 | fs.ModeSticky, "1777"},
		{"0", 0, "0000"},
	}
	for _, tt := range tests {
		got, err := sandbox.ParseMode(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("sandbox.ParseMode(%q) = %v, %v, want %v", tt.in, got, err, tt.want)
		}
		if o := sandbox.FormatMode(got); o != tt.octal {
			t.Errorf("sandbox.FormatMode(sandbox.ParseMode(%q)) = %q, want %q", tt.in, o, tt.octal)
		}
	}
	for _, bad := range []string{"", "rwx", "888", "17777", "-1", "u+x"} {
		if _, err := sandbox.ParseMode(bad); err == nil {
			t.Errorf("sandbox.ParseMode(%q) = nil error, want one", bad)
		}
	}
}

func TestFormatAge(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"},
		{0, "0s"},
		{59 * time.Second, "59s"},
		{time.Minute, "1m"},
		{59*time.Minute + 59*time.Second, "59m"},
		{time.Hour, "1h"},
		{47 * time.Hour, "47h"},
		{48 * time.Hour, "2d"},
		{400 * 24 * time.Hour, "400d"},
	}
	for _, tt := range tests {
		if got := formatAge(tt.d); got != tt.want {
			t.Errorf("formatAge(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1 KiB"}, {1536, "1.5 KiB"},
		{512 << 20, "512 MiB"}, {8 << 30, "8 GiB"}, {3 << 40, "3 TiB"},
	}
	for _, tt := range tests {
		if got := formatBytes(tt.n); got != tt.want {
			t.Errorf("formatBytes(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

func testSandbox(now time.Time) sandbox.Sandbox {
	return sandbox.Sandbox{
		ID: "01abc", Name: "agent-bot-build", Tenant: "acme", Owner: "bot", Image: "default", Size: "small",
		Runtime: "runsc", Status: sandbox.StatusRunning, Reason: "created",
		CreatedAt: now.Add(-90 * time.Minute), ExpiresAt: now.Add(22 * time.Hour),
		Capabilities:  []string{"exec", "files", "runtime:runsc"},
		Resources:     sandbox.Sizes()["small"],
		DiskUsedBytes: 3 << 20,
		Labels:        []string{"ci", "team-search"},
	}
}

func TestPrintSandbox(t *testing.T) {
	now := time.Date(2025, 1, 2, 12, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	if err := printSandbox(&out, testSandbox(now), now); err != nil {
		t.Fatal(err)
	}
	want := `name:          agent-bot-build
id:            01abc
status:        running (created)
runtime:       runsc
capabilities:  exec, files, runtime:runsc
tenant:        acme
owner:         bot
image:         default
size:          small (1 CPU, 512 MiB, 256 pids, 2 GiB disk)
created:       2025-01-02T10:30:00Z (1h ago)
expires:       2025-01-03T10:00:00Z (in 22h)
head:          -
labels:        ci, team-search
disk used:     3 MiB
`
	if out.String() != want {
		t.Errorf("printSandbox() =\n%s\nwant\n%s", out.String(), want)
	}
}

func TestPrintSandboxTable(t *testing.T) {
	now := time.Date(2025, 1, 2, 12, 0, 0, 0, time.UTC)
	other := testSandbox(now)
	other.Name, other.Status, other.Size, other.Owner, other.CreatedAt = "x", sandbox.StatusStopped, "large", "", now.Add(-3*24*time.Hour)
	asleep := testSandbox(now)
	asleep.Name, asleep.Status, asleep.Reason = "y", sandbox.StatusSleeping, "idle for 10m0s"
	var out bytes.Buffer
	if err := printSandboxTable(&out, []sandbox.Sandbox{testSandbox(now), other, asleep}, now); err != nil {
		t.Fatal(err)
	}
	want := `NAME              STATUS     SIZE    RUNTIME   AGE   OWNER   TENANT
agent-bot-build   running    small   runsc     1h    bot     acme
x                 stopped    large   runsc     3d    -       acme
y                 sleeping   small   runsc     1h    bot     acme
`
	if out.String() != want {
		t.Errorf("printSandboxTable() =\n%s\nwant\n%s", out.String(), want)
	}
}

func TestPrintCheckpoint(t *testing.T) {
	cp := sandbox.Checkpoint{ID: "c02", Sandbox: "build", Label: "before migration", Parent: "c01",
		CreatedAt: time.Date(2025, 1, 2, 12, 0, 0, 0, time.UTC), SizeBytes: 1536}
	var out bytes.Buffer
	if err := printCheckpoint(&out, cp); err != nil {
		t.Fatal(err)
	}
	want := `id:       c02
label:    before migration
parent:   c01
size:     1.5 KiB
memory:   no
created:  2025-01-02T12:00:00Z
`
	if out.String() != want {
		t.Errorf("printCheckpoint() =\n%s\nwant\n%s", out.String(), want)
	}
}

func TestPrintCheckpointTable(t *testing.T) {
	at := time.Date(2025, 1, 2, 12, 0, 0, 0, time.UTC)
	cps := []sandbox.Checkpoint{
		{ID: "c01", CreatedAt: at, SizeBytes: 4096},
		{ID: "c02", Label: "before migration", Parent: "c01", CreatedAt: at.Add(time.Hour), SizeBytes: 512 << 20},
		{ID: "c03", Label: "tried it", Parent: "c02", CreatedAt: at.Add(2 * time.Hour)},
	}
	tests := []struct {
		name, head, want string
	}{
		{"head marked", "c02", `  ID    LABEL              PARENT   CREATED                SIZE
  c01   -                  -        2025-01-02T12:00:00Z   4 KiB
* c02   before migration   c01      2025-01-02T13:00:00Z   512 MiB
  c03   tried it           c02      2025-01-02T14:00:00Z   0 B
`},
		{"no head", "", `  ID    LABEL              PARENT   CREATED                SIZE
  c01   -                  -        2025-01-02T12:00:00Z   4 KiB
  c02   before migration   c01      2025-01-02T13:00:00Z   512 MiB
  c03   tried it           c02      2025-01-02T14:00:00Z   0 B
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := printCheckpointTable(&out, cps, tt.head); err != nil {
				t.Fatal(err)
			}
			if out.String() != tt.want {
				t.Errorf("printCheckpointTable(head %q) =\n%s\nwant\n%s", tt.head, out.String(), tt.want)
			}
		})
	}
}

func TestPrintFileTable(t *testing.T) {
	mtime := time.Date(2025, 1, 2, 12, 34, 56, 0, time.UTC)
	entries := []sandbox.FileInfo{
		{Name: "bin", Type: sandbox.FileDir, Mode: 0o755, Owner: "sandbox", Size: 4096, ModTime: mtime},
		{Name: "notes.txt", Type: sandbox.FileRegular, Mode: 0o644, Owner: "sandbox", Size: 12, ModTime: mtime},
		{Name: "link", Type: sandbox.FileSymlink, Mode: 0o777, Owner: "root", Size: 9, ModTime: mtime, Target: "notes.txt"},
	}
	var out bytes.Buffer
	if err := printFileTable(&out, entries); err != nil {
		t.Fatal(err)
	}
	want := `MODE        OWNER    SIZE  MTIME             NAME
drwxr-xr-x  sandbox  4096  2025-01-02 12:34  bin
-rw-r--r--  sandbox  12    2025-01-02 12:34  notes.txt
lrwxrwxrwx  root     9     2025-01-02 12:34  link -> notes.txt
`
	if out.String() != want {
		t.Errorf("printFileTable() =\n%s\nwant\n%s", out.String(), want)
	}
}

func FuzzParseMode(f *testing.F) {
	for _, s := range []string{"644", "0755", "4755", "0o700", "17777", "rwx", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := sandbox.ParseMode(s)
		if err != nil {
			return
		}
		back, err := sandbox.ParseMode(sandbox.FormatMode(m))
		if err != nil || back != m {
			t.Errorf("sandbox.ParseMode(sandbox.FormatMode(sandbox.ParseMode(%q))) = %v, %v, want %v", s, back, err, m)
		}
		if got := formatMode(sandbox.FileRegular, m); len(got) != 10 {
			t.Errorf("formatMode(%v) = %q, want 10 characters", m, got)
		}
	})
}
