//go:build !linux

package fake

import "errors"

// setImmutable is Linux only; elsewhere a committed snapshot is read-only
// only to a process that is not root.
func setImmutable(path string, on bool) error {
	if !on {
		return nil
	}
	return errors.ErrUnsupported
}
