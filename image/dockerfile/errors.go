package dockerfile

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Error is how Parse, (*File).Plan and (*Plan).Resolve refuse a
// Dockerfile: the line and instruction at fault and what is wrong with
// them. Err wraps one of the sentinels below when the fault is one a
// caller may branch on.
type Error struct {
	// Line is the instruction's first line, counted from 1; for a fault
	// of the file as a whole (too large, no instruction) the line reached.
	Line int
	// Instruction is the instruction as written, continuation lines
	// joined; "" when the fault is not one instruction's.
	Instruction string
	Err         error
}

// maxQuoted is the most of an instruction an error message quotes.
const maxQuoted = 120

func (e *Error) Error() string {
	if e.Instruction == "" {
		return fmt.Sprintf("dockerfile: line %d: %v", e.Line, e.Err)
	}
	return fmt.Sprintf("dockerfile: line %d: %s: %v", e.Line, quoteInstruction(e.Instruction), e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// quoteInstruction shortens an instruction to at most maxQuoted runes for
// a message.
func quoteInstruction(s string) string {
	if utf8.RuneCountInString(s) <= maxQuoted {
		return s
	}
	r := []rune(s)
	return string(r[:maxQuoted]) + "…"
}

// Sentinels a caller may test with errors.Is.
var (
	// ErrSyntax: the Dockerfile parser refused the text.
	ErrSyntax = errors.New("syntax error")
	// ErrUnsupported: an instruction, a flag or a form hearth does not
	// build (HEALTHCHECK, ONBUILD, RUN --mount, ADD of a URL, …).
	ErrUnsupported = errors.New("not supported")
	// ErrMultiStage: a second FROM, or COPY --from.
	ErrMultiStage = errors.New("multi-stage builds are not supported")
	// ErrEscapes: a source, a symlink on its way or a tar entry leads
	// out of the build context.
	ErrEscapes = errors.New("escapes the build context")
	// ErrNotFound: a source names nothing in the context (or only what
	// .dockerignore excludes).
	ErrNotFound = errors.New("not found in the build context (or excluded by .dockerignore)")
	// ErrChanged: a file's content is not what Resolve hashed.
	ErrChanged = errors.New("changed in the build context since the plan was resolved")
	// ErrTooLarge: the Dockerfile, the context or a step is over a limit.
	ErrTooLarge = errors.New("too large")
	// ErrUnsafe: a tar entry (of a context or of an archive ADD unpacks)
	// that is refused: a device, a FIFO, a path through a symlink, a
	// duplicate, a hard link to nothing before it.
	ErrUnsafe = errors.New("unsafe entry")
)

// lineError is the Error for instruction in at its line.
func lineError(in *instruction, err error) error {
	return &Error{Line: in.line, Instruction: in.text, Err: err}
}

// lineErrorf is lineError with a formatted message.
func lineErrorf(in *instruction, format string, args ...any) error {
	return lineError(in, fmt.Errorf(format, args...))
}
