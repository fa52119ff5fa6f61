package sandbox

import "strings"

// MaxNameLen is the longest sandbox name: one DNS label.
const MaxNameLen = 63

// ValidateName checks that name is a DNS label: 1–63 characters of lowercase
// letters, digits and '-', starting and ending with a letter or digit. The
// error is invalid_argument and says which rule failed.
func ValidateName(name string) error {
	bad := func(why string) *Error {
		return Errorf(CodeInvalidArgument, "invalid sandbox name %q: %s", name, why).
			WithHint("use 1-%d lowercase letters, digits and '-', starting and ending with a letter or digit, e.g. %q", MaxNameLen, "build-42")
	}
	switch {
	case name == "":
		return bad("empty")
	case len(name) > MaxNameLen:
		return bad("longer than 63 characters").With("limit", MaxNameLen).With("used", len(name))
	case name[0] == '-' || name[len(name)-1] == '-':
		return bad("starts or ends with '-'")
	}
	if i := strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-')
	}); i >= 0 {
		return bad("character " + quoteRune(name, i) + " is not allowed")
	}
	return nil
}

func quoteRune(s string, i int) string {
	r := []rune(s[i:])[0]
	return "'" + string(r) + "'"
}
