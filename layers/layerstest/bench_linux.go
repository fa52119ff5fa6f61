package layerstest

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/layers"
)

// BuildImage commits in s the image "img": 3000 small files in 30
// directories under usr/, and an empty etc/. The backends' benchmarks
// start from it.
func BuildImage(b testing.TB, s layers.Store) {
	b.Helper()
	ctx := context.Background()
	p, err := s.Prepare(ctx, "img-build", "")
	if err != nil {
		b.Fatal(err)
	}
	for d := range 30 {
		dir := filepath.Join(p, "usr", fmt.Sprintf("d%02d", d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 100 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", f)), []byte(strings.Repeat("x", 4096+f)), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := os.MkdirAll(filepath.Join(p, "etc"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := s.Commit(ctx, "img", "img-build"); err != nil {
		b.Fatal(err)
	}
}

// BenchSnapshot measures a checkpoint of a running sandbox, once per size
// in bytes: a Snapshot of its root, an active snapshot of BuildImage's
// image in a store newStore makes empty, holding that much that the
// sandbox wrote. The data is written once per size, before the timer,
// with O_DIRECT into a preallocated file and then synced (syncfs), so it
// is on disk: the kernel has none of it to write out at snapshot time.
// Before each Snapshot, with the timer stopped, the sandbox writes and
// syncs a small file, as it would between checkpoints. Besides ns/op it
// reports the median (p50-ns) and slowest (max-ns) Snapshot.
func BenchSnapshot(b *testing.B, newStore func(b *testing.B) layers.Store, sizes ...int64) {
	for _, size := range sizes {
		b.Run(sizeName(size), func(b *testing.B) {
			ctx := context.Background()
			s := newStore(b)
			BuildImage(b, s)
			root, err := s.Prepare(ctx, "sb", "img")
			if err != nil {
				b.Fatal(err)
			}
			writeDirect(b, filepath.Join(root, "data"), size)
			Syncfs(b, root)
			var times []time.Duration
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				if err := os.WriteFile(filepath.Join(root, "etc", "note"), []byte(strconv.Itoa(i)), 0o644); err != nil {
					b.Fatal(err)
				}
				Syncfs(b, root)
				b.StartTimer()
				start := time.Now()
				if err := s.Snapshot(ctx, fmt.Sprintf("ck%d", i), "sb"); err != nil {
					b.Fatal(err)
				}
				times = append(times, time.Since(start))
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(times[len(times)-1].Nanoseconds()), "max-ns")
		})
	}
}

// sizeName names a benchmark size: 1MB, 100MB, 1GB.
func sizeName(n int64) string {
	if n >= 1<<30 && n%(1<<30) == 0 {
		return fmt.Sprintf("%dGB", n>>30)
	}
	return fmt.Sprintf("%dMB", n>>20)
}

// Syncfs commits the filesystem that holds path: data and metadata.
func Syncfs(b testing.TB, path string) {
	b.Helper()
	if err := layers.Syncfs(path); err != nil {
		b.Fatal(err)
	}
}

// writeDirect writes n bytes (a multiple of 4 MiB, or less than that and a
// multiple of 4 KiB) of a pattern to the new file path, preallocated, with
// O_DIRECT: real data blocks on disk, not a sparse file, without filling
// the page cache.
func writeDirect(b *testing.B, path string, n int64) {
	b.Helper()
	const chunk = 4 << 20
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_DIRECT, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, n); err != nil {
		b.Fatalf("fallocate %s: %v", path, err)
	}
	// O_DIRECT wants an aligned buffer: mmap's is page aligned.
	buf, err := unix.Mmap(-1, 0, chunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Munmap(buf)
	x := uint64(0x9e3779b97f4a7c15)
	for i := 0; i < len(buf); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(buf[i:], x)
	}
	for off := int64(0); off < n; off += chunk {
		p := buf[:min(chunk, n-off)]
		// A different first word per chunk: no two blocks alike.
		binary.LittleEndian.PutUint64(p, uint64(off))
		if _, err := f.WriteAt(p, off); err != nil {
			b.Fatalf("write %s at %d: %v", path, off, err)
		}
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}
