package sandbox_test

import (
	"testing"

	"github.com/hearth/hearth/sandbox"
)

func TestExecValidateTTY(t *testing.T) {
	tests := []struct {
		name string
		tty  *sandbox.TTYSize
		ok   bool
	}{
		{"none", nil, true},
		{"zeros mean the default", &sandbox.TTYSize{}, true},
		{"typical", &sandbox.TTYSize{Rows: 50, Cols: 200}, true},
		{"largest", &sandbox.TTYSize{Rows: 1000, Cols: 1000}, true},
		{"too many rows", &sandbox.TTYSize{Rows: 1001, Cols: 80}, false},
		{"too many columns", &sandbox.TTYSize{Rows: 24, Cols: 65535}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := sandbox.ExecRequest{Shell: "true", TTY: tt.tty}
			err := req.Validate()
			if (err == nil) != tt.ok || err != nil && !sandbox.IsCode(err, sandbox.CodeInvalidArgument) {
				t.Errorf("Validate(tty %+v) = %v, want ok=%v", tt.tty, err, tt.ok)
			}
			if tt.tty != nil && *req.TTY != *tt.tty {
				t.Errorf("Validate changed the size to %+v", *req.TTY)
			}
		})
	}
}

func TestExecControlValidate(t *testing.T) {
	tests := []struct {
		name string
		c    sandbox.ExecControl
		ok   bool
	}{
		{"signal", sandbox.ExecControl{Signal: "TERM"}, true},
		{"unknown signal is the kernel's to refuse", sandbox.ExecControl{Signal: "NOPE"}, true},
		{"resize", sandbox.ExecControl{Resize: &sandbox.TTYSize{Rows: 40, Cols: 120}}, true},
		{"resize to the default", sandbox.ExecControl{Resize: &sandbox.TTYSize{}}, true},
		{"neither", sandbox.ExecControl{}, false},
		{"both", sandbox.ExecControl{Signal: "TERM", Resize: &sandbox.TTYSize{}}, false},
		{"resize too large", sandbox.ExecControl{Resize: &sandbox.TTYSize{Rows: 24, Cols: 1001}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate()
			if (err == nil) != tt.ok || err != nil && !sandbox.IsCode(err, sandbox.CodeInvalidArgument) {
				t.Errorf("Validate(%+v) = %v, want ok=%v", tt.c, err, tt.ok)
			}
		})
	}
}
