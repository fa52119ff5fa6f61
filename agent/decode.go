package agent

import (
	"bytes"
	"encoding/json"

	"github.com/hearth/hearth/sandbox"
)

// DecodeRequest parses a request frame strictly: unknown fields, trailing
// data and an op without its operand are invalid_argument.
func DecodeRequest(payload []byte) (Request, error) {
	var req Request
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return Request{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: malformed request: %v", err)
	}
	if dec.More() {
		return Request{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: trailing data after request")
	}
	switch req.Op {
	case OpExec:
		if req.Exec == nil {
			return Request{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: exec request without exec")
		}
		if err := req.Exec.Validate(); err != nil {
			return Request{}, err
		}
	case OpWrite:
		if req.Write == nil || req.Write.Path == "" {
			return Request{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: write request without a path")
		}
	case OpRead, OpList, OpStat, OpMkdir, OpRemove, OpChmod:
		if req.Path == "" {
			return Request{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: %s needs a path", req.Op)
		}
	case OpRename:
		if req.Path == "" || req.To == "" {
			return Request{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: rename needs a path and a destination")
		}
	}
	return req, nil
}
