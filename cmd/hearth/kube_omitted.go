//go:build nokube

package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"syscall"

	"github.com/hearth/hearth/audit"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
)

// This file stands in for kube.go in the hearth binary built with the tag
// nokube, as scripts/install.sh builds bin/hearth. That binary links no
// Kubernetes library: theirs is most of a full build's size (130 MB
// against 46), and their package initialization ran at every start, about
// 25 ms of CPU before any verb. Every verb that is a client of the API,
// and serve on its own, run here; a daemon in a cluster (`hearth node`,
// `hearth serve --kubeconfig` or `--in-cluster`) is handed to hearth-kube,
// the same command built without the tag.

// inKube replaces this process with hearth-kube running verb with args,
// the arguments given here, so that a daemon in a cluster keeps this
// process's id, streams and environment. It returns only an error: no
// hearth-kube beside this binary or in PATH, or one that could not start.
func inKube(verb string, args []string) error {
	path, err := findBeside("hearth-kube")
	if err != nil {
		return &sandbox.Error{Code: sandbox.CodeFailedPrecondition,
			Message: verb + " in a Kubernetes cluster is run by hearth-kube, which is not beside hearth or in PATH",
			Hint:    "build it with `CGO_ENABLED=0 go build -o bin/hearth-kube ./cmd/hearth` (scripts/install.sh does)"}
	}
	err = syscall.Exec(path, append([]string{path, verb}, args...), os.Environ())
	return &sandbox.Error{Code: sandbox.CodeInternal, Message: "start " + path + ": " + err.Error()}
}

// runNode runs `hearth node` in hearth-kube.
func runNode(_ context.Context, args []string, _ func(string) string, _, _ io.Writer) error {
	return inKube("node", args)
}

// kubeWiring wires nothing: runServe has handed a daemon in a cluster to
// hearth-kube before it gets here.
func kubeWiring(cfg serveConfig, _ *lifecycle.Options, _ io.Writer, _ *slog.Logger) (func(context.Context, *lifecycle.Service, *audit.Recorder, string), error) {
	if cfg.kube.role != kubeNone {
		return nil, errors.New("this hearth has no Kubernetes wiring: hearth-kube runs a daemon in a cluster")
	}
	return func(context.Context, *lifecycle.Service, *audit.Recorder, string) {}, nil
}
