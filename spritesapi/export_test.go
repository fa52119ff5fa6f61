package spritesapi

import (
	"net/url"

	"github.com/hearth/hearth/sandbox"
)

// Exported for the fuzz tests of package spritesapi_test.

// DecodeBodies decodes b as each of the door's JSON bodies, checking each
// as its handler does before acting on it, and returns the errors.
func DecodeBodies(b []byte) []error {
	var errs []error
	var create createRequest
	if err := decodeBody(b, &create); err == nil {
		_, err = sizeFor(create.Config)
		errs = append(errs, err)
		_, err = publicPorts(create.URLSettings, sandbox.Sandbox{})
		errs = append(errs, err)
	} else {
		errs = append(errs, err)
	}
	var update updateRequest
	errs = append(errs, decodeBody(b, &update))
	var paths pathBody
	if err := decodeBody(b, &paths); err == nil {
		errs = append(errs, paths.resolve(&paths.Path, &paths.Source, &paths.Dest))
		_, err = sandbox.ParseMode(paths.Mode)
		errs = append(errs, err)
	} else {
		errs = append(errs, err)
	}
	var policy networkPolicy
	if err := decodeBody(b, &policy); err == nil {
		_, err = egressOf(policy)
		errs = append(errs, err)
	} else {
		errs = append(errs, err)
	}
	var ck checkpointRequest
	errs = append(errs, decodeBody(b, &ck))
	return errs
}

// ParseExec is parseExec.
func ParseExec(q url.Values) (sandbox.ExecRequest, bool, error) {
	x, err := parseExec(q)
	return x.req, x.stdin, err
}

// Control is what the exec stream makes of a text message of the client:
// the control it passes on, if any.
func Control(msg []byte) (sandbox.ExecControl, bool) { return control(msg) }
