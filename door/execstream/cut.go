package execstream

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/hearth/hearth/sandbox"
)

// Where the long-output option saves a stream that was cut: in the
// sandbox user's home (/home/sandbox, where relative paths resolve), as
// the caller, so that the caller can read it with its next command.
const (
	homeDir   = "/home/sandbox"
	outputDir = ".hearth"
)

// finish returns what the result carries of c's stream: all of it, or,
// when it was cut, its head, a marker line and its tail, after saving the
// whole stream (up to the daemon's write limit) in the sandbox at the path
// it returns ("" when saving failed, which the marker says).
func (x *Runner) finish(ctx context.Context, call Call, id string, c *capture) (string, string) {
	if !c.cut() {
		return c.head.String() + string(c.tail), ""
	}
	rel := fmt.Sprintf("%s/exec-%s.%s", outputDir, id, c.stream)
	path := homeDir + "/" + rel
	cut := c.total - int64(c.head.Len()) - int64(len(c.tail))
	var marker string
	if err := x.save(ctx, call, rel, c); err != nil {
		path = ""
		marker = fmt.Sprintf("[… %d bytes cut; saving the full output failed: %s …]", cut, sandbox.AsError(err).Message)
	} else if c.spooled < c.total {
		marker = fmt.Sprintf("[… %d bytes cut; the first %d bytes of the output in %s …]", cut, c.spooled, path)
	} else {
		marker = fmt.Sprintf("[… %d bytes cut; full output in %s …]", cut, path)
	}
	return c.head.String() + "\n" + marker + "\n" + string(c.tail), path
}

// save writes c's spooled stream into the sandbox at path (relative to
// the home), as the caller.
func (x *Runner) save(ctx context.Context, call Call, path string, c *capture) error {
	if c.spoolErr != nil {
		x.log.Error("spool exec output", "err", c.spoolErr)
		return sandbox.Errorf(sandbox.CodeInternal, "the daemon could not hold the output")
	}
	if _, err := c.spool.Seek(0, io.SeekStart); err != nil {
		return x.PublicError(ctx, "save exec output", err)
	}
	_, err := x.files.WriteFile(ctx, call.Principal, call.Sandbox, sandbox.WriteRequest{Path: path, Parents: true}, c.spool)
	if err != nil {
		return x.PublicError(ctx, "save exec output", err)
	}
	return nil
}

func randomID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// capture is one output stream of an exec: it keeps the first limit/2
// bytes and the last limit/2, counts them all, and, once the stream
// outgrows limit, spools it (its first spoolMax bytes) to a temporary file
// for finish to save in the sandbox. Each write is also passed on to live,
// if any, whose errors are ignored: a caller that stopped listening does
// not stop the command.
type capture struct {
	limit    int
	spoolMax int64
	stream   string
	live     io.Writer

	total    int64
	head     bytes.Buffer
	tail     []byte // the last limit-limit/2 bytes past the head, once cut
	spool    *os.File
	spooled  int64
	spoolErr error
}

// cut reports whether the stream outgrew the limit.
func (c *capture) cut() bool { return c.total > int64(c.limit) }

func (c *capture) Write(p []byte) (int, error) {
	if c.live != nil && len(p) > 0 {
		c.live.Write(p)
	}
	c.total += int64(len(p))
	if c.spool == nil && c.spoolErr == nil && c.total > int64(c.limit) {
		c.startSpool()
	}
	if c.spool != nil && c.spooled < c.spoolMax {
		chunk := p[:min(int64(len(p)), c.spoolMax-c.spooled)]
		n, err := c.spool.Write(chunk)
		c.spooled += int64(n)
		if err != nil {
			c.spoolErr = err
			c.close()
		}
	}
	rest := p
	if room := c.limit/2 - c.head.Len(); room > 0 && c.tail == nil {
		k := min(room, len(rest))
		c.head.Write(rest[:k])
		rest = rest[k:]
	}
	if len(rest) > 0 || c.tail != nil {
		keep := c.limit - c.limit/2
		c.tail = append(c.tail, rest...)
		if len(c.tail) > keep {
			c.tail = append(c.tail[:0:0], c.tail[len(c.tail)-keep:]...)
		}
	}
	return len(p), nil
}

// startSpool opens the spool and writes into it what the stream held so
// far: the head, and the tail (which is all of the rest until the cap).
func (c *capture) startSpool() {
	f, err := os.CreateTemp("", "hearth-exec-")
	if err != nil {
		c.spoolErr = err
		return
	}
	os.Remove(f.Name()) // unlinked: nothing outlives the process
	c.spool = f
	for _, b := range [][]byte{c.head.Bytes(), c.tail} {
		n, err := f.Write(b)
		c.spooled += int64(n)
		if err != nil {
			c.spoolErr = err
			c.close()
			return
		}
	}
}

// close releases the spool.
func (c *capture) close() {
	if c.spool != nil {
		c.spool.Close()
		c.spool = nil
	}
}
