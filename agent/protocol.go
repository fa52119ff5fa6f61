package agent

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"

	"github.com/hearth/hearth/sandbox"
)

// FrameKind says what a frame carries.
type FrameKind byte

// Frame kinds. Input flows client→agent, output agent→client.
const (
	FrameRequest FrameKind = 'Q' // client: JSON Request; first frame of a connection
	FrameStdin   FrameKind = 'I' // client: bytes for the command's stdin
	FrameData    FrameKind = 'D' // either way: file content
	FrameEOF     FrameKind = 'Z' // client: end of stdin or of file content
	FrameControl FrameKind = 'C' // client: JSON sandbox.ExecControl for a running command
	FrameSecret  FrameKind = 'S' // client: one secret environment variable of an exec, "NAME=VALUE" (see Request.SecretEnv)
	FrameStdout  FrameKind = 'O' // agent: command stdout, byte-exact
	FrameStderr  FrameKind = 'X' // agent: command stderr, byte-exact
	FrameResult  FrameKind = 'R' // agent: JSON result of the op; last frame
	FrameError   FrameKind = 'E' // agent: JSON sandbox.Error; last frame
)

// MaxFrame is the largest payload of one frame. Longer content is split into
// several frames; a peer announcing more is broken and is cut off.
const MaxFrame = 1 << 20

// headerLen is the frame header: one kind byte and a big-endian uint32 length.
const headerLen = 5

// causeDetail is the detail of an internal error's FrameError that holds
// its cause: the daemon logs it, and Client takes it out of the error its
// caller sees.
const causeDetail = "cause"

// WriteFrame writes one frame. It is not safe for concurrent use on one
// writer. On a net.Conn the header and payload go out in one writev.
func WriteFrame(w io.Writer, kind FrameKind, payload []byte) error {
	if len(payload) > MaxFrame {
		return fmt.Errorf("agent: frame of %d bytes exceeds %d", len(payload), MaxFrame)
	}
	hdr := make([]byte, headerLen)
	putHeader(hdr, kind, len(payload))
	if len(payload) == 0 {
		_, err := w.Write(hdr)
		return err
	}
	bufs := net.Buffers{hdr, payload}
	_, err := bufs.WriteTo(w)
	return err
}

// writeFramed writes buf as one frame in one write: buf[:headerLen] is space
// reserved for the header and buf[headerLen:] is the payload. Readers that
// fill a buffer at an offset use it to avoid a copy and a second syscall.
func writeFramed(w io.Writer, kind FrameKind, buf []byte) error {
	putHeader(buf, kind, len(buf)-headerLen)
	_, err := w.Write(buf)
	return err
}

func putHeader(hdr []byte, kind FrameKind, n int) {
	hdr[0] = byte(kind)
	binary.BigEndian.PutUint32(hdr[1:headerLen], uint32(n))
}

// WriteJSON writes v as the JSON payload of one frame.
func WriteJSON(w io.Writer, kind FrameKind, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return WriteFrame(w, kind, b)
}

// ReadFrame reads one frame, reusing buf for the payload when it is large
// enough. It returns io.EOF only at a clean frame boundary, and an error for
// a truncated frame or one longer than MaxFrame.
func ReadFrame(r io.Reader, buf []byte) (FrameKind, []byte, error) {
	var hdr [headerLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			return 0, nil, fmt.Errorf("agent: truncated frame header: %w", err)
		}
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxFrame {
		return 0, nil, fmt.Errorf("agent: frame of %d bytes exceeds %d", n, MaxFrame)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, fmt.Errorf("agent: truncated frame: %w", err)
	}
	return FrameKind(hdr[0]), buf, nil
}

// Op names an operation.
type Op string

// Operations.
const (
	OpPing   Op = "ping"   // result: PingResult
	OpExec   Op = "exec"   // input: stdin and control frames; output: stdout/stderr; result: sandbox.ExecResult
	OpRead   Op = "read"   // output: data frames; result: sandbox.FileInfo (an error comes before any data)
	OpWrite  Op = "write"  // input: data frames then EOF; result: sandbox.FileInfo
	OpList   Op = "list"   // output: data frames, each a JSON array of sandbox.FileInfo; result: ListResult
	OpStat   Op = "stat"   // result: sandbox.FileInfo
	OpMkdir  Op = "mkdir"  // result: sandbox.FileInfo (mkdir -p)
	OpRemove Op = "remove" // result: empty object
	OpRename Op = "rename" // result: sandbox.FileInfo of the new path
	OpChmod  Op = "chmod"  // result: sandbox.FileInfo
	// OpConnect answers with ConnectResult, after which the connection is
	// the raw TCP stream to Request.Port on the sandbox's loopback, with no
	// frames either way (see Client.Connect).
	OpConnect Op = "connect"
	OpPorts   Op = "ports" // result: PortsResult
)

// Request is the first frame of every connection.
type Request struct {
	Op Op `json:"op"`
	// Exec is set for OpExec.
	Exec *sandbox.ExecRequest `json:"exec,omitempty"`
	// Write is set for OpWrite.
	Write *sandbox.WriteRequest `json:"write,omitempty"`
	// Path is the file operand of read, list, stat, mkdir, remove, chmod and
	// the source of rename; relative paths are relative to the sandbox
	// user's home.
	Path string `json:"path,omitempty"`
	// To is rename's destination.
	To string `json:"to,omitempty"`
	// Recursive makes remove delete a directory and everything below it.
	Recursive bool `json:"recursive,omitempty"`
	// ShellSize, for OpExec, says that the shell script is not in
	// Exec.Shell but follows this frame as FrameData frames of ShellSize
	// bytes in all (before any stdin frame), so that a script of any size
	// fits in frames of MaxFrame. Client.Exec sends scripts over
	// maxArgScript this way.
	ShellSize int64 `json:"shell_size,omitempty"`
	// SecretEnv, for OpExec, is the number of FrameSecret frames that
	// follow this frame (before a script's data frames), each one
	// environment variable of the command, "NAME=VALUE", over any of the
	// same name: the secrets the command is given (see Client.ExecSecrets).
	// They travel as raw bytes, never in the JSON, so that the agent holds
	// each value in one buffer of its own, which it wipes once the command
	// has started or failed to.
	SecretEnv int `json:"secret_env,omitempty"`
	// Mode is chmod's new mode: permission bits plus fs.ModeSetuid,
	// fs.ModeSetgid and fs.ModeSticky, in fs.FileMode's encoding (the same
	// as sandbox.FileInfo.Mode and sandbox.WriteRequest.Mode).
	Mode uint32 `json:"mode,omitempty"`
	// Port is connect's TCP port, 1 to 65535, on the sandbox's loopback.
	Port int `json:"port,omitempty"`
}

// ConnectResult is the last frame of OpConnect: from the next byte on, the
// connection carries the TCP stream.
type ConnectResult struct {
	// Address is the address the agent reached, such as "127.0.0.1:8080"
	// or "[::1]:8080".
	Address string `json:"address"`
}

// PortsResult is the answer to OpPorts.
type PortsResult struct {
	// Ports are the TCP ports processes in the sandbox listen on, sorted by
	// port then address; never nil.
	Ports []sandbox.ListeningPort `json:"ports"`
}

// ListResult ends OpList. The entries themselves come before it in data
// frames, so that a directory of any size fits in frames of MaxFrame.
type ListResult struct {
	// Count is the number of entries sent.
	Count int `json:"count"`
}

// PingResult is the answer to OpPing.
type PingResult struct {
	// Version is the agent's protocol version.
	Version int `json:"version"`
	// PID is the agent's own pid in the sandbox (1 when it is init).
	PID int `json:"pid"`
}

// ProtocolVersion is bumped on an incompatible protocol change. Additions
// that an older peer refuses or skips do not bump it: an agent that
// predates a request field refuses the request (DecodeRequest rejects
// unknown fields), and one that predates a client frame kind skips those
// frames (so an agent older than FrameControl ignores controls).
const ProtocolVersion = 1
