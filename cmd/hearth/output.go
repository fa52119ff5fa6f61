package main

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/sandbox"
)

// printSandbox writes one sandbox as "key: value" lines; the first five
// (name, id, status, runtime, capabilities) are the ones create promises.
func printSandbox(w io.Writer, sb sandbox.Sandbox, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	status := string(sb.Status)
	if sb.Reason != "" {
		status += " (" + sb.Reason + ")"
	}
	caps := strings.Join(sb.Capabilities, ", ")
	if caps == "" {
		caps = "-"
	}
	expires := "never"
	if !sb.ExpiresAt.IsZero() {
		expires = formatTime(sb.ExpiresAt) + " (in " + formatAge(sb.ExpiresAt.Sub(now)) + ")"
	}
	rows := [][2]string{
		{"name", sb.Name},
		{"id", sb.ID},
		{"status", status},
		{"runtime", sb.Runtime},
		{"capabilities", caps},
		{"tenant", sb.Tenant},
		{"owner", sb.Owner},
		{"image", sb.Image},
		{"size", sb.Size + " (" + formatResources(sb.Resources) + ")"},
		{"created", formatTime(sb.CreatedAt) + " (" + formatAge(now.Sub(sb.CreatedAt)) + " ago)"},
		{"expires", expires},
		{"head", dash(sb.Head)},
		{"labels", dash(strings.Join(sb.Labels, ", "))},
	}
	if sb.DiskUsedBytes > 0 {
		rows = append(rows, [2]string{"disk used", formatBytes(sb.DiskUsedBytes)})
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s:\t%s\n", r[0], r[1])
	}
	return tw.Flush()
}

// printSandboxTable writes the list table NAME STATUS SIZE RUNTIME AGE
// OWNER TENANT. Names are unique within a tenant: an operator, who sees
// every tenant's, writes TENANT/NAME for one outside the system tenant.
func printSandboxTable(w io.Writer, sbs []sandbox.Sandbox, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATUS\tSIZE\tRUNTIME\tAGE\tOWNER\tTENANT")
	for _, sb := range sbs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sb.Name, sb.Status, dash(sb.Size), dash(sb.Runtime),
			formatAge(now.Sub(sb.CreatedAt)), dash(sb.Owner), dash(sb.Tenant))
	}
	return tw.Flush()
}

// printImage writes one image as "key: value" lines.
func printImage(w io.Writer, img sandbox.Image, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	cfg := img.Config
	user := fmt.Sprintf("%d:%d", cfg.UID, cfg.GID)
	if cfg.User != "" {
		user = cfg.User + " (" + user + ")"
	}
	rows := [][2]string{
		{"name", img.Name},
		{"digest", dash(img.Digest)},
		{"tenant", dash(img.Tenant)},
		{"source", dash(img.Source)},
		{"from", dash(img.Ref)},
		{"size", formatBytes(img.Size)},
		{"current", yesNo(img.Current)},
		{"public", yesNo(img.Public)},
		{"user", user},
		{"home", dash(cfg.Home)},
		{"workdir", dash(cfg.WorkingDir)},
		{"env", dash(strings.Join(cfg.Env, " "))},
		{"entrypoint", dash(strings.Join(cfg.Entrypoint, " "))},
		{"cmd", dash(strings.Join(cfg.Cmd, " "))},
		{"created", formatTime(img.CreatedAt) + " (" + formatAge(now.Sub(img.CreatedAt)) + " ago)"},
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s:\t%s\n", r[0], r[1])
	}
	return tw.Flush()
}

// printCheckpoint writes one checkpoint as "key: value" lines.
func printCheckpoint(w io.Writer, cp sandbox.Checkpoint) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	rows := [][2]string{
		{"id", cp.ID},
		{"label", dash(cp.Label)},
		{"parent", dash(cp.Parent)},
		{"size", formatBytes(cp.SizeBytes)},
		{"memory", yesNo(cp.Memory)},
		{"created", formatTime(cp.CreatedAt)},
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s:\t%s\n", r[0], r[1])
	}
	return tw.Flush()
}

// printCheckpointTable writes the table ID LABEL PARENT CREATED SIZE, the
// head's row marked with a leading "*" as git marks its current branch.
func printCheckpointTable(w io.Writer, cps []sandbox.Checkpoint, head string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "  ID\tLABEL\tPARENT\tCREATED\tSIZE")
	for _, cp := range cps {
		mark := " "
		if cp.ID == head {
			mark = "*"
		}
		fmt.Fprintf(tw, "%s %s\t%s\t%s\t%s\t%s\n", mark, cp.ID, dash(cp.Label), dash(cp.Parent),
			formatTime(cp.CreatedAt), formatBytes(cp.SizeBytes))
	}
	return tw.Flush()
}

// printFileInfo writes one file's metadata as "key: value" lines.
func printFileInfo(w io.Writer, fi sandbox.FileInfo) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	rows := [][2]string{
		{"path", fi.Path},
		{"type", string(fi.Type)},
		{"size", strconv.FormatInt(fi.Size, 10)},
		{"mode", formatMode(fi.Type, fi.Mode) + " (" + sandbox.FormatMode(fi.Mode) + ")"},
		{"owner", fi.Owner + ":" + fi.Group},
		{"mtime", formatTime(fi.ModTime)},
	}
	if fi.Type == sandbox.FileSymlink {
		rows = append(rows, [2]string{"target", fi.Target})
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s:\t%s\n", r[0], r[1])
	}
	return tw.Flush()
}

// printFileTable writes directory entries like `ls -l`: MODE OWNER SIZE
// MTIME NAME, symlinks as "name -> target".
func printFileTable(w io.Writer, entries []sandbox.FileInfo) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODE\tOWNER\tSIZE\tMTIME\tNAME")
	for _, fi := range entries {
		name := fi.Name
		if fi.Type == sandbox.FileSymlink && fi.Target != "" {
			name += " -> " + fi.Target
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", formatMode(fi.Type, fi.Mode), dash(fi.Owner), fi.Size,
			fi.ModTime.Format("2006-01-02 15:04"), name)
	}
	return tw.Flush()
}

// formatMode renders a file type and permission bits as `ls -l` does, with
// s/S for setuid and setgid and t/T for sticky: "drwxr-sr-x".
func formatMode(t sandbox.FileType, m fs.FileMode) string {
	var b [10]byte
	switch t {
	case sandbox.FileDir:
		b[0] = 'd'
	case sandbox.FileSymlink:
		b[0] = 'l'
	case sandbox.FileRegular:
		b[0] = '-'
	default:
		b[0] = '?'
	}
	const rwx = "rwxrwxrwx"
	for i := range 9 {
		if m&(1<<uint(8-i)) != 0 {
			b[i+1] = rwx[i]
		} else {
			b[i+1] = '-'
		}
	}
	special := func(i int, set bool, c byte) {
		if !set {
			return
		}
		if b[i] == '-' {
			c -= 'a' - 'A' // set without execute
		}
		b[i] = c
	}
	special(3, m&fs.ModeSetuid != 0, 's')
	special(6, m&fs.ModeSetgid != 0, 's')
	special(9, m&fs.ModeSticky != 0, 't')
	return string(b[:])
}

// formatAge renders a duration as its largest unit, as kubectl does: "45s",
// "12m", "5h", "3d". Negative durations (clock skew) show as "0s".
func formatAge(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// formatResources renders limits as "1 CPU, 512 MiB, 256 pids".
func formatResources(r sandbox.Resources) string {
	cpu := strconv.FormatFloat(float64(r.MilliCPU)/1000, 'f', -1, 64)
	out := fmt.Sprintf("%s CPU, %s, %d pids", cpu, formatBytes(r.MemoryBytes), r.Pids)
	if r.DiskBytes > 0 {
		out += ", " + formatBytes(r.DiskBytes) + " disk"
	}
	return out
}

// formatBytes renders a byte count in binary units: "512 MiB", "1.5 GiB".
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, exp := float64(n), 0
	for v >= unit && exp < 4 {
		v /= unit
		exp++
	}
	num := strings.TrimSuffix(strconv.FormatFloat(v, 'f', 1, 64), ".0")
	return num + " " + [...]string{"B", "KiB", "MiB", "GiB", "TiB"}[exp]
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format(time.RFC3339)
}

// yesNo is "yes" or "no".
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// textOrBase64 puts b into m as key when it is valid UTF-8, and as
// key+"_base64" otherwise, so that a JSON consumer never receives mangled
// bytes and notices when it must decode.
func textOrBase64(m map[string]any, key string, b []byte) {
	if utf8.Valid(b) {
		m[key] = string(b)
		return
	}
	m[key+"_base64"] = b // encoding/json encodes []byte as base64
}

// isTerminal reports whether f, a stream of the CLI, is a terminal: what
// a person reads (progress redrawn in place) and where an archive must not
// go.
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(file.Fd()), unix.TCGETS)
	return err == nil
}

// printList prints list as the JSON object {key: list} (an empty list, never
// null) with --json, else as a table: header, then row(item) for each item,
// their columns separated by tabs.
func printList[T any](c *cli, key string, list []T, header string, row func(T) string) error {
	if list == nil {
		list = []T{}
	}
	if c.json {
		return c.printJSON(map[string]any{key: list})
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, x := range list {
		fmt.Fprintln(tw, row(x))
	}
	return tw.Flush()
}
