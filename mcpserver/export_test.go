package mcpserver

import "encoding/json"

// ToolArguments decodes raw as the arguments of sandbox_create and of
// sandbox_exec, as the SDK hands them to the tools (encoding/json into the
// input types), and checks them as the tools do before calling lifecycle.
// It returns the decoding errors and the tools' own.
func ToolArguments(raw []byte) (decodeErrs []error, checkErrs []error) {
	var create createIn
	if err := json.Unmarshal(raw, &create); err != nil {
		decodeErrs = append(decodeErrs, err)
	} else {
		_, err := create.request()
		checkErrs = append(checkErrs, err)
	}
	var exec execIn
	if err := json.Unmarshal(raw, &exec); err != nil {
		decodeErrs = append(decodeErrs, err)
	} else {
		_, err := exec.request()
		checkErrs = append(checkErrs, err)
	}
	return decodeErrs, checkErrs
}
