package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/sandbox"
)

// encode answers v as JSON with status; a nil v sends no body (204).
func (s *server) encode(w http.ResponseWriter, status int, v any) {
	if v == nil {
		w.WriteHeader(status)
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		s.log.Error("internal error", "op", "encode response", "err", err)
		status = http.StatusInternalServerError
		b, _ = json.Marshal(sandbox.AsError(err).Body())
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// decode reads r's JSON body into v, strictly (see decodeJSON), reading at
// most Options.MaxBodyBytes: a larger body is too_large, refused before a
// byte is read when its Content-Length says so. An empty body leaves v as
// it is, the zero request.
func (s *server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	const hint = "JSON requests are small; file content goes to PUT .../fs/file"
	if err := door.BodyTooLarge(r, s.opts.MaxBodyBytes, hint); err != nil {
		return err
	}
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
	err := decodeJSON(body, v, true)
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return door.TooLarge(-1, tooBig.Limit, hint)
	}
	return err
}

// required checks that the required body field name is set: decode leaves
// a missing field at its zero value, which no required field may take.
// example is a body that would be right, for the hint.
func required(name, value, example string) error {
	if value != "" {
		return nil
	}
	return sandbox.Errorf(sandbox.CodeInvalidArgument, "missing field %q", name).
		WithHint("send %s", example)
}

// decodeJSON decodes exactly one JSON object from r into v, a pointer to a
// struct. Unknown fields, wrong types (any other JSON value than an object,
// null included), numbers out of their field's range, bad syntax and
// trailing data are invalid_argument errors that name what is wrong; errors
// from the value's own UnmarshalJSON (a bad duration) pass through, and
// read errors come back unchanged. An empty input is an error unless
// emptyOK.
func decodeJSON(r io.Reader, v any, emptyOK bool) error {
	src := &readErrReader{r: r}
	dec := json.NewDecoder(src)
	dec.DisallowUnknownFields()
	var raw json.RawMessage
	err := dec.Decode(&raw)
	if err == nil {
		err = decodeObject(raw, v)
	}
	if err == nil {
		_, err = dec.Token()
		switch {
		case src.err != nil:
			return src.err
		case err != io.EOF:
			return sandbox.Errorf(sandbox.CodeInvalidArgument, "unexpected data after the JSON value").
				WithHint("send exactly one JSON object")
		}
		return nil
	}
	var (
		e      *sandbox.Error
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case src.err != nil:
		return src.err
	case errors.As(err, &e):
		return e
	case err == io.EOF && emptyOK:
		return nil
	case err == io.EOF:
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "empty request").WithHint("send a JSON object")
	case errors.As(err, &syntax), err == io.ErrUnexpectedEOF:
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "malformed JSON: %v", err).WithHint("send one JSON object")
	case errors.As(err, &typ) && typ.Field != "" && jsonKind(typ.Type) == "number" && strings.HasPrefix(typ.Value, "number"):
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "field %q cannot be the %s: it takes %s", typ.Field, typ.Value, numberRange(typ.Type)).
			WithHint("give %q a number in its range", typ.Field)
	case errors.As(err, &typ) && typ.Field != "":
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "field %q cannot be a JSON %s", typ.Field, typ.Value).
			WithHint("%q takes a %s", typ.Field, jsonKind(typ.Type))
	case errors.As(err, &typ):
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "expected a JSON object, got a JSON %s", typ.Value).
			WithHint("send one JSON object")
	}
	// encoding/json reports unknown fields with a plain error.
	if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "unknown field %s", field).
			WithHint("the fields are: %s", strings.Join(jsonFields(v), ", "))
	}
	return sandbox.Errorf(sandbox.CodeInvalidArgument, "invalid JSON: %v", err)
}

// decodeObject decodes raw, one JSON value, into v, refusing anything but
// an object: encoding/json takes null for "leave v as it is", which would
// make `null` the zero request.
func decodeObject(raw json.RawMessage, v any) error {
	if len(raw) > 0 && raw[0] != '{' {
		kind := "value"
		switch raw[0] {
		case 'n':
			kind = "null"
		case '[':
			kind = "array"
		case '"':
			kind = "string"
		case 't', 'f':
			kind = "boolean"
		default:
			kind = "number"
		}
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "expected a JSON object, got a JSON %s", kind).
			WithHint("send one JSON object, e.g. {}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// numberRange says which numbers a numeric type holds.
func numberRange(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := t.Bits()
		return fmt.Sprintf("a whole number from %d to %d", -(int64(1) << (bits - 1)), int64(uint64(1)<<(bits-1)-1))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("a whole number from 0 to %d", uint64(1)<<(t.Bits()-1)*2-1)
	}
	return "a number"
}

// readErrReader remembers the error of its reader other than io.EOF, so
// that a broken or oversized body is told apart from bad JSON.
type readErrReader struct {
	r   io.Reader
	err error
}

func (r *readErrReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}

// jsonKind names the JSON kind that decodes into t.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "value"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	}
	return "value"
}

// jsonFields lists the JSON field names of the struct v points to, for the
// hint of an unknown-field error.
func jsonFields(v any) []string {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// decodeBytes is decodeJSON over a message already in memory.
func decodeBytes(b []byte, v any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "empty message").WithHint("send a JSON object")
	}
	return decodeJSON(bytes.NewReader(b), v, false)
}
