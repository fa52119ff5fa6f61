package client

import (
	"github.com/coder/websocket"

	"github.com/hearth/hearth/sandbox"
)

// ParseMessage is parseMessage for the fuzz test: the output stream and
// data, or the end's result or error.
func ParseMessage(typ websocket.MessageType, msg []byte) (stream byte, data []byte, res *sandbox.ExecResult, end *sandbox.Error, err error) {
	m, err := parseMessage(typ, msg)
	return m.stream, m.data, m.result, m.err, err
}
