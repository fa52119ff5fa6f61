package agent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/sandbox"
)

// A command's secrets (Request.SecretEnv) must reach its environment and
// nothing else of the sandbox: a memory checkpoint saves everything the
// agent's heap holds, freed or not. Go cannot be asked to build an
// environment from bytes it then forgets (os.StartProcess copies every
// entry into an envp block of its own, garbage the agent cannot wipe), so
// the values never go through it. Each secret arrives in a frame of its
// own, read into a buffer of the agent's; the command is started with a
// placeholder of the same length in its place ('*'s), traced up to its
// exec (as for its rlimits: see limits.go); at the exec stop, before the
// new program's first instruction, the agent writes each value over its
// placeholder on the new program's stack (PTRACE_POKEDATA, as its
// tracer), and wipes its buffers once the command has started or failed
// to. What may stay behind in the agent: up to a word of a value in the
// registers and stack slot of the poke.

const (
	// maxSecretEnv bounds the secrets of one command.
	maxSecretEnv = 256
	// maxSecretEntry bounds one secret's "NAME=VALUE".
	maxSecretEntry = 128 + 1 + sandbox.MaxSecretLen
	// secretPlaceholder fills a secret's place in the environment the
	// command is started with, until its exec stop.
	secretPlaceholder = "*"
)

// secretVar is one secret environment variable of a command.
type secretVar struct {
	entry []byte // "NAME=VALUE", a buffer of the agent's own
	name  string // NAME
	index int    // its place in command.env
}

func (v *secretVar) value() []byte { return v.entry[len(v.name)+1:] }

// wipeSecrets zeroes the values of vars.
func wipeSecrets(vars []secretVar) {
	for _, v := range vars {
		clear(v.entry)
	}
}

// receiveSecrets reads the n FrameSecret frames that follow an exec
// request. Each is read into one scratch buffer, copied into a buffer of
// its own and wiped there; on any error every buffer is wiped.
func receiveSecrets(conn io.Reader, n int) (vars []secretVar, err error) {
	scratch := make([]byte, maxSecretEntry)
	defer func() {
		clear(scratch)
		if err != nil {
			wipeSecrets(vars)
		}
	}()
	for range n {
		kind, payload, err := ReadFrame(conn, scratch)
		if err != nil {
			return vars, fmt.Errorf("%w: %v", errBroken, err)
		}
		v, err := parseSecret(kind, payload)
		clear(payload)
		if err != nil {
			return vars, err
		}
		if slices.ContainsFunc(vars, func(o secretVar) bool { return o.name == v.name }) {
			clear(v.entry)
			return vars, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: secret %s is sent twice", v.name)
		}
		vars = append(vars, v)
	}
	return vars, nil
}

// parseSecret checks one secret frame and returns it in a buffer of its
// own: a FrameSecret holding NAME=VALUE, NAME a valid secret name, VALUE
// with no NUL byte (an environment cannot hold one).
func parseSecret(kind FrameKind, payload []byte) (secretVar, error) {
	if kind != FrameSecret {
		return secretVar{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: the exec request's secret frames must follow it, got %q", kind)
	}
	if len(payload) > maxSecretEntry {
		return secretVar{}, sandbox.Errorf(sandbox.CodeTooLarge, "agent: a secret of %d bytes exceeds %d", len(payload), maxSecretEntry)
	}
	name, _, ok := bytes.Cut(payload, []byte("="))
	if !ok {
		return secretVar{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: a secret frame is not NAME=VALUE")
	}
	if err := sandbox.ValidateSecretName(string(name)); err != nil {
		return secretVar{}, err
	}
	v := secretVar{name: string(name)}
	if bytes.IndexByte(payload[len(name)+1:], 0) >= 0 {
		return secretVar{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "secret %s contains a NUL byte, which an environment cannot hold", v.name).
			WithHint("set the secret again without it")
	}
	v.entry = make([]byte, len(payload))
	copy(v.entry, payload)
	return v, nil
}

// withSecretPlaceholders returns env without the entries that vars name,
// and with a placeholder entry for each (NAME= and a '*' per byte of its
// value) at the end, whose index it records in vars.
func withSecretPlaceholders(env []string, vars []secretVar) []string {
	if len(vars) == 0 {
		return env
	}
	out := slices.DeleteFunc(env, func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.ContainsFunc(vars, func(v secretVar) bool { return v.name == k })
	})
	for i := range vars {
		vars[i].index = len(out)
		out = append(out, vars[i].name+"="+strings.Repeat(secretPlaceholder, len(vars[i].value())))
	}
	return out
}

// wordSize is the size of a pointer on the stack of a new program.
const wordSize = 8

// putSecrets writes the values of vars into the environment of pid, a
// tracee stopped at its exec, over their placeholders: env is the
// environment it was started with. At the exec stop the new program's
// stack pointer points at argc, followed by argv and envp, each ending
// with a null pointer (the System V ABI's process entry; the kernel may
// have changed argv, for a #! script, never envp); each placeholder is
// checked before it is overwritten.
func putSecrets(pid int, env []string, vars []secretVar) error {
	if len(vars) == 0 {
		return nil
	}
	sp, err := stackPointer(pid)
	if err != nil {
		return fmt.Errorf("read the command's stack pointer: %w", err)
	}
	argc, err := peekWord(pid, sp)
	if err != nil {
		return fmt.Errorf("read the command's argc: %w", err)
	}
	if argc > 1<<24 { // more than any stack holds: not argc
		return fmt.Errorf("the command's argc reads %d", argc)
	}
	envp := sp + wordSize*(1+argc+1)
	for _, v := range vars {
		addr, err := peekWord(pid, envp+wordSize*uintptr(v.index))
		if err != nil {
			return fmt.Errorf("read the command's environment: %w", err)
		}
		want := env[v.index]
		got := make([]byte, len(want))
		if _, err := unix.PtracePeekData(pid, addr, got); err != nil {
			return fmt.Errorf("read the command's environment: %w", err)
		}
		if string(got) != want {
			return errors.New("the command's environment is not where it was put")
		}
		if _, err := unix.PtracePokeData(pid, addr+uintptr(len(v.name)+1), v.value()); err != nil {
			return fmt.Errorf("write secret %s into the command's environment: %w", v.name, err)
		}
	}
	return nil
}

// peekWord reads the word at addr of tracee pid.
func peekWord(pid int, addr uintptr) (uintptr, error) {
	var b [wordSize]byte
	if _, err := unix.PtracePeekData(pid, addr, b[:]); err != nil {
		return 0, err
	}
	return uintptr(binary.NativeEndian.Uint64(b[:])), nil
}
