package main

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

// TestParseServeRuntimeFlags: --runtime-flag is repeatable, keeps the
// order given, and refuses a value that is not a flag.
func TestParseServeRuntimeFlags(t *testing.T) {
	env := func(string) string { return "" }
	cfg, err := parseServe([]string{"--agent", "/bin/true", "--runtime-flag", "--platform=kvm", "--runtime-flag=--debug-log=/tmp/runsc/"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"--platform=kvm", "--debug-log=/tmp/runsc/"}; !slices.Equal(cfg.runtimeFlags, want) {
		t.Errorf("runtimeFlags = %q, want %q", cfg.runtimeFlags, want)
	}
	if cfg, err := parseServe([]string{"--agent", "/bin/true"}, env, io.Discard); err != nil || cfg.runtimeFlags != nil {
		t.Errorf("without --runtime-flag: runtimeFlags = %q, %v; want none", cfg.runtimeFlags, err)
	}
	_, err = parseServe([]string{"--agent", "/bin/true", "--runtime-flag", "platform=kvm"}, env, io.Discard)
	var usage *usageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), `"platform=kvm" is not a flag`) {
		t.Errorf("--runtime-flag platform=kvm: %v; want a usage error naming it", err)
	}
}
