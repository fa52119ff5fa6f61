package httpapi

import "io"

// Exported for the tests of package httpapi_test, which sit outside the
// package like any other caller.
var (
	DecodeExecMessage = decodeExecMessage
)

// DecodeJSON is decodeJSON for the fuzz tests of the request bodies.
func DecodeJSON(r io.Reader, v any, emptyOK bool) error { return decodeJSON(r, v, emptyOK) }

// Bodies are the types the API decodes request bodies into, by name, for
// the fuzz tests.
func Bodies() map[string]func() any {
	return map[string]func() any{
		"restore": func() any { return new(restoreRequest) },
		"fork":    func() any { return new(forkRequest) },
		"secret":  func() any { return new(secretValue) },
		"binding": func() any { return new(bindingRequest) },
		"pull":    func() any { return new(pullRequest) },
		"image":   func() any { return new(imageRequest) },
		"public":  func() any { return new(publicRequest) },
		"login":   func() any { return new(loginRequest) },
	}
}
