package main

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/hearth/hearth/httpapi"
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

// TestParseServeMaxConnections: --max-connections defaults to the API's
// default and refuses less than one.
func TestParseServeMaxConnections(t *testing.T) {
	env := func(string) string { return "" }
	if cfg, err := parseServe([]string{"--agent", "/bin/true"}, env, io.Discard); err != nil || cfg.maxConnections != httpapi.DefaultMaxConnections {
		t.Errorf("default maxConnections = %d, %v; want %d", cfg.maxConnections, err, httpapi.DefaultMaxConnections)
	}
	if cfg, err := parseServe([]string{"--agent", "/bin/true", "--max-connections", "8"}, env, io.Discard); err != nil || cfg.maxConnections != 8 {
		t.Errorf("--max-connections 8 = %d, %v", cfg.maxConnections, err)
	}
	_, err := parseServe([]string{"--agent", "/bin/true", "--max-connections", "0"}, env, io.Discard)
	var usage *usageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "--max-connections") {
		t.Errorf("--max-connections 0: %v; want a usage error naming it", err)
	}
}
