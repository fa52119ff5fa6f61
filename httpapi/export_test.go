package httpapi

// Exported for the tests of package httpapi_test, which sit outside the
// package like any other caller.
var (
	DecodeExecMessage = decodeExecMessage
)
