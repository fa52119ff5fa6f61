package policy_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/hearth/hearth/policy"
	"github.com/hearth/hearth/sandbox"
)

const (
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// wantErr is what a refusal must be, word for word.
type wantErr struct {
	code    sandbox.Code
	message string
	hint    string
	details map[string]any
}

// check fails t unless err is exactly w (nil w: err must be nil).
func (w *wantErr) check(t *testing.T, what string, err error) {
	t.Helper()
	if w == nil {
		if err != nil {
			t.Errorf("%s: error %v, want none", what, err)
		}
		return
	}
	var e *sandbox.Error
	if !errors.As(err, &e) {
		t.Errorf("%s: error %#v, want a *sandbox.Error %s", what, err, w.code)
		return
	}
	if e.Code != w.code {
		t.Errorf("%s: code %s, want %s", what, e.Code, w.code)
	}
	if e.Message != w.message {
		t.Errorf("%s: message\n  %q\nwant\n  %q", what, e.Message, w.message)
	}
	if e.Hint != w.hint {
		t.Errorf("%s: hint %q, want %q", what, e.Hint, w.hint)
	}
	if !reflect.DeepEqual(e.Details, w.details) {
		t.Errorf("%s: details %#v, want %#v", what, e.Details, w.details)
	}
}

func ptr[T any](v T) *T { return &v }

func dur(d time.Duration) *sandbox.Duration { return ptr(sandbox.Duration(d)) }

// small is the default size's resources.
func small() sandbox.Resources { return sandbox.Sizes()[sandbox.DefaultSize] }

// fits is a budget that holds exactly n small sandboxes in every dimension.
func fits(n int64) sandbox.Resources {
	s := small()
	return sandbox.Resources{MilliCPU: n * s.MilliCPU, MemoryBytes: n * s.MemoryBytes, DiskBytes: n * s.DiskBytes}
}

// limits are the defaults with f applied.
func limits(f func(*policy.Limits)) policy.Limits {
	l := policy.Defaults()
	f(&l)
	return l
}
