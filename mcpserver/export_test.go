package mcpserver

import "encoding/json"

// ToolArguments decodes raw as the arguments of sandbox_create and of
// sandbox_exec, as the SDK hands them to the tools (encoding/json into the
// input types), and checks them as the tools do before calling lifecycle.
// It returns the decoding errors and the tools' own.
func ToolArguments(raw []byte) (decodeErrs []error, checkErrs []error) {
	var create createIn
	var exec execIn
	for _, in := range []interface{ check() error }{&create, &exec} {
		if err := json.Unmarshal(raw, in); err != nil {
			decodeErrs = append(decodeErrs, err)
			continue
		}
		checkErrs = append(checkErrs, in.check())
	}
	return decodeErrs, checkErrs
}

func (in *createIn) check() error { _, err := in.request(); return err }
func (in *execIn) check() error   { _, err := in.request(); return err }
