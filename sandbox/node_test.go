package sandbox_test

import (
	"strings"
	"testing"

	"github.com/hearth/hearth/sandbox"
)

func TestValidateNodeName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
		why  string // what the error says, when not ok
	}{
		{name: "n", ok: true},
		{name: "node-1", ok: true},
		{name: "0web", ok: true},
		{name: "web-01-example-com", ok: true},
		{name: strings.Repeat("a", 63), ok: true},
		{name: "", why: "empty"},
		{name: strings.Repeat("a", 64), why: "longer than 63"},
		{name: "-lead", why: "starts or ends with '-'"},
		{name: "trail-", why: "starts or ends with '-'"},
		{name: "Web1", why: "'W' is not allowed"},
		{name: "web_1", why: "'_' is not allowed"},
		{name: "web.example.com", why: "'.' is not allowed"},
		{name: "nœud", why: "'œ' is not allowed"},
		{name: "a b", why: "' ' is not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := sandbox.ValidateNodeName(tt.name)
			if tt.ok {
				if err != nil {
					t.Errorf("ValidateNodeName(%q) = %v, want ok", tt.name, err)
				}
				return
			}
			if !sandbox.IsCode(err, sandbox.CodeInvalidArgument) || sandbox.AsError(err).Hint == "" {
				t.Fatalf("ValidateNodeName(%q) = %#v, want invalid_argument with a hint", tt.name, err)
			}
			if msg := sandbox.AsError(err).Message; !strings.Contains(msg, "invalid node name") || !strings.Contains(msg, tt.why) {
				t.Errorf("ValidateNodeName(%q) = %q, want it to say it is a node name and %q", tt.name, msg, tt.why)
			}
		})
	}
}

// TestValidatePool: a pool follows the node names' rule (a DNS label;
// TestValidateNodeName has the cases), and says it is a pool.
func TestValidatePool(t *testing.T) {
	for _, name := range []string{"gpu", "gpu-a100", "0", strings.Repeat("a", 63)} {
		if err := sandbox.ValidatePool(name); err != nil {
			t.Errorf("ValidatePool(%q) = %v, want ok", name, err)
		}
	}
	for _, name := range []string{"", "GPU", "gpu_a100", "-gpu", "gpu-", "gpu.a100", strings.Repeat("a", 64)} {
		err := sandbox.ValidatePool(name)
		if !sandbox.IsCode(err, sandbox.CodeInvalidArgument) || sandbox.AsError(err).Hint == "" {
			t.Errorf("ValidatePool(%q) = %v, want invalid_argument with a hint", name, err)
			continue
		}
		if !strings.Contains(err.Error(), "invalid pool") {
			t.Errorf("ValidatePool(%q) = %v, want it to say it is a pool", name, err)
		}
	}
}
