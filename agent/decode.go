package agent

import (
	"bytes"
	"encoding/json"
	"io/fs"

	"github.com/hearth/hearth/sandbox"
)

// DecodeRequest parses a request frame strictly: unknown fields, trailing
// data, an unknown op, an op without its operand, an operand the op does not
// take (shell_size, secret_env, port), secret_env outside 0 to
// maxSecretEnv, an exec that names secrets (their values come in
// FrameSecret frames), a connect port outside 1 to 65535 and a mode with
// bits other than permissions, setuid, setgid and sticky are
// invalid_argument. Paths are checked (NUL bytes, "/" for remove and
// rename) when they are resolved.
func DecodeRequest(payload []byte) (Request, error) {
	var req Request
	if err := decodeStrict(payload, "request", &req); err != nil {
		return Request{}, err
	}
	if req.ShellSize != 0 && req.Op != OpExec {
		return Request{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: shell_size is only for exec")
	}
	if req.Port != 0 && req.Op != OpConnect {
		return Request{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: port is only for connect")
	}
	switch {
	case req.SecretEnv != 0 && req.Op != OpExec:
		return Request{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: secret_env is only for exec")
	case req.SecretEnv < 0 || req.SecretEnv > maxSecretEnv:
		return Request{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: secret_env %d is outside 0 to %d", req.SecretEnv, maxSecretEnv)
	}
	switch req.Op {
	case OpExec:
		if req.Exec == nil {
			return Request{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: exec request without exec")
		}
		v := *req.Exec
		switch {
		case req.ShellSize < 0:
			return Request{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: negative shell_size")
		case req.ShellSize > maxScript:
			return Request{}, sandbox.Errorf(sandbox.CodeTooLarge, "shell script of %d bytes exceeds %d", req.ShellSize, maxScript).
				With("max_bytes", maxScript).WithHint("put the data in a file and keep the script short")
		case req.ShellSize > 0 && (v.Shell != "" || len(v.Argv) > 0):
			return Request{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: exec with shell_size has a shell or argv")
		case req.ShellSize > 0:
			v.Shell = ":" // the script follows; check the rest
		}
		if err := v.Validate(); err != nil {
			return Request{}, err
		}
		if len(v.Secrets) > 0 {
			return Request{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: exec names secrets; their values come in secret frames")
		}
	case OpWrite:
		if req.Write == nil || req.Write.Path == "" {
			return Request{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: write request without a path")
		}
		if err := checkMode(req.Write.Mode); err != nil {
			return Request{}, err
		}
		if req.Write.MaxBytes < 0 {
			return Request{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: write max_bytes must not be negative")
		}
	case OpChmod:
		if req.Path == "" {
			return Request{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: %s needs a path", req.Op)
		}
		if err := checkMode(fs.FileMode(req.Mode)); err != nil {
			return Request{}, err
		}
	case OpRead, OpList, OpStat, OpMkdir, OpRemove:
		if req.Path == "" {
			return Request{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: %s needs a path", req.Op)
		}
	case OpRename:
		if req.Path == "" || req.To == "" {
			return Request{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: rename needs a path and a destination")
		}
	case OpConnect:
		if err := sandbox.ValidatePort(req.Port); err != nil {
			return Request{}, err
		}
	case OpPing, OpPorts:
	default:
		return Request{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: unknown op %q", req.Op).
			WithHint("the daemon and the agent may be of different versions")
	}
	return req, nil
}

// modeBits are the bits a mode in a request may carry.
const modeBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

func checkMode(m fs.FileMode) error {
	if m&^modeBits != 0 {
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "mode %#o has bits other than permissions, setuid, setgid and sticky", uint32(m)).
			WithHint("use permission bits such as 0644 or 0755")
	}
	return nil
}

// DecodeControl parses a FrameControl payload as strictly as DecodeRequest
// parses a request: unknown fields, trailing data and a control that
// sandbox.ExecControl.Validate refuses are invalid_argument.
func DecodeControl(payload []byte) (sandbox.ExecControl, error) {
	var c sandbox.ExecControl
	if err := decodeStrict(payload, "control", &c); err != nil {
		return sandbox.ExecControl{}, err
	}
	if err := c.Validate(); err != nil {
		return sandbox.ExecControl{}, err
	}
	return c, nil
}

// decodeStrict decodes the JSON payload of a frame holding what into v,
// refusing unknown fields and trailing data.
func decodeStrict(payload []byte, what string, v any) error {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: malformed %s: %v", what, err)
	}
	if dec.More() {
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: trailing data after %s", what)
	}
	return nil
}
