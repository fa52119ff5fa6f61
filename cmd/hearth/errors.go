package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/hearth/hearth/sandbox"
)

// Exit codes of the CLI itself; sandbox.Code.ExitCode() gives the others.
const (
	exitUsage       = 2   // bad flags or arguments, as the shells and flag parsers use
	exitInterrupted = 130 // 128+SIGINT: the user stopped hearth
)

// usageError is a bad flag or argument. It exits 2 and its hint points at
// the verb's usage.
type usageError struct {
	verb string // "" for hearth itself
	msg  string
}

func (e *usageError) Error() string { return e.msg }

// exitStatus is a remote command's exit status that hearth exec passes
// through as its own; nothing is printed for it.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// report renders err on c.stderr, as text or, with --json, as the error
// object, and returns the exit code: 0 for nil, the remote exit status for
// exec, 2 for usage errors, 130 when interrupted, else the code's ExitCode.
func (c *cli) report(ctx context.Context, err error) int {
	e, code := classify(ctx, err)
	if e == nil {
		return code
	}
	if e.Code == sandbox.CodeUnauthenticated && c.tokenSource == "" {
		e.Hint = "no token was sent: set HEARTH_TOKEN or --token (the local daemon's operator token is in its data dir, " + tokenFilePath(c.getenv) + ")"
	}
	writeError(c.stderr, c.json, e)
	return code
}

// classify maps err to the error to show (nil for none) and the exit code.
func classify(ctx context.Context, err error) (*sandbox.Error, int) {
	var (
		usage  *usageError
		status exitStatus
		e      *sandbox.Error
	)
	switch {
	case err == nil, errors.Is(err, errHelpShown), errors.Is(err, flag.ErrHelp):
		// flag.ErrHelp: serve's own flag set printed its usage.
		return nil, 0
	case errors.As(err, &status):
		return nil, int(status)
	case errors.As(err, &usage):
		hint := "run 'hearth help' for the verbs"
		if usage.verb != "" {
			hint = "run 'hearth " + usage.verb + " -h' for usage"
		}
		return &sandbox.Error{Code: sandbox.CodeInvalidArgument, Message: usage.msg, Hint: hint}, exitUsage
	case errors.As(err, &e):
		return e, e.Code.ExitCode()
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		return &sandbox.Error{Code: sandbox.CodeUnavailable, Message: "interrupted",
			Hint: "a running command keeps running for its grace period, then is killed"}, exitInterrupted
	case errors.Is(err, context.DeadlineExceeded):
		e = &sandbox.Error{Code: sandbox.CodeTimeout, Message: err.Error(), Hint: "retry, or allow more time"}
		return e, e.Code.ExitCode()
	}
	// Not from the daemon (the client turns every daemon answer, and an
	// unreachable daemon, into a *sandbox.Error): a local failure, whose
	// text is the caller's own to see.
	e = &sandbox.Error{Code: sandbox.CodeInternal, Message: err.Error(),
		Hint: "this failed in the local hearth process (its stdin, stdout or files), not in the daemon"}
	return e, e.Code.ExitCode()
}

// writeError renders e: its Text ("error: <message>" and "hint: <hint>"
// lines, the words the MCP door answers with too), or with
// asJSON the object {"error":{"code","message","hint","details"}} with every
// key present so that scripts can index it without guarding.
func writeError(w io.Writer, asJSON bool, e *sandbox.Error) {
	if asJSON {
		b, _ := json.Marshal(e.Body()) // the API's error body, key for key
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	io.WriteString(w, e.Text())
}
