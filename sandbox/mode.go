package sandbox

import (
	"fmt"
	"io/fs"
	"strconv"
	"strings"
)

// ParseMode parses a Unix octal mode as chmod spells it ("755", "0644",
// "4755", "0o750"; at most 07777) into the fs.FileMode the API carries,
// where setuid, setgid and sticky are fs.ModeSetuid, fs.ModeSetgid and
// fs.ModeSticky rather than the octal bits 04000, 02000 and 01000. A bad
// mode is invalid_argument.
func ParseMode(s string) (fs.FileMode, error) {
	digits := strings.TrimPrefix(strings.TrimPrefix(s, "0o"), "0O")
	n, err := strconv.ParseUint(digits, 8, 32)
	if err != nil || digits == "" || n > 0o7777 {
		return 0, Errorf(CodeInvalidArgument, "invalid mode %q", s).WithHint("give octal permission bits of at most 07777, such as 0644 or 0755")
	}
	m := fs.FileMode(n & 0o777)
	if n&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if n&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if n&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m, nil
}

// FormatMode renders m's permission, setuid, setgid and sticky bits in the
// octal notation ParseMode reads: "0755", "4755".
func FormatMode(m fs.FileMode) string {
	n := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		n |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		n |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		n |= 0o1000
	}
	return fmt.Sprintf("%04o", n)
}
