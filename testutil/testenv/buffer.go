package testenv

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// Buffer is a bytes.Buffer that is safe for concurrent use: a sink for the
// output of a process or a logger that writes from other goroutines while
// the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// WaitFor waits until what was written holds want; it fails t when that
// takes longer than d.
func (b *Buffer) WaitFor(t testing.TB, want string, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); !strings.Contains(b.String(), want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("output %q, after %v, still without %q", b.String(), d, want)
		}
	}
}
