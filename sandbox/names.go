package sandbox

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNameLen is the longest sandbox name: one DNS label.
const MaxNameLen = 63

// ValidateName checks that name is a DNS label: 1–63 characters of lowercase
// letters, digits and '-', starting and ending with a letter or digit. The
// error is invalid_argument and says which rule failed.
func ValidateName(name string) error { return validateLabel("sandbox name", name, "build-42") }

// validateLabel checks that name, a what, is a DNS label (see
// ValidateName); the hint's example is example.
func validateLabel(what, name, example string) error {
	bad := func(why string) *Error {
		return Errorf(CodeInvalidArgument, "invalid %s %q: %s", what, name, why).
			WithHint("use 1-%d lowercase letters, digits and '-', starting and ending with a letter or digit, e.g. %q", MaxNameLen, example)
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

// ValidateNamePrefix checks a token's name restriction (TokenRequest's
// NamePrefix): 1-62 lowercase letters, digits and '-', starting with a
// letter or digit, so that some sandbox name can carry it.
func ValidateNamePrefix(prefix string) error {
	bad := func(why string) *Error {
		return Errorf(CodeInvalidArgument, "invalid name prefix %q: %s", prefix, why).
			WithHint("use 1-%d lowercase letters, digits and '-', starting with a letter or digit, e.g. %q", MaxNameLen-1, "hermes-")
	}
	switch {
	case prefix == "":
		return bad("empty")
	case len(prefix) >= MaxNameLen:
		return bad("longer than 62 characters").With("limit", MaxNameLen-1).With("used", len(prefix))
	case prefix[0] == '-':
		return bad("starts with '-'")
	}
	if i := strings.IndexFunc(prefix, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-')
	}); i >= 0 {
		return bad("character " + quoteRune(prefix, i) + " is not allowed")
	}
	return nil
}

// Limits of a sandbox's labels.
const (
	MaxLabels          = 32
	MaxSandboxLabelLen = 63
)

// ValidateLabels checks a sandbox's labels: at most MaxLabels, each 1 to
// MaxSandboxLabelLen bytes of printable UTF-8 (no control characters), none
// repeated.
func ValidateLabels(labels []string) error {
	if len(labels) > MaxLabels {
		return Errorf(CodeInvalidArgument, "%d labels, over the limit of %d", len(labels), MaxLabels).
			WithHint("keep at most %d labels", MaxLabels).With("limit", MaxLabels).With("used", len(labels))
	}
	seen := make(map[string]bool, len(labels))
	for _, l := range labels {
		switch {
		case l == "" || len(l) > MaxSandboxLabelLen:
			return Errorf(CodeInvalidArgument, "label %q is empty or longer than %d bytes", l, MaxSandboxLabelLen).
				WithHint("use labels of 1-%d characters, e.g. %q", MaxSandboxLabelLen, "team-search")
		case !utf8.ValidString(l) || strings.IndexFunc(l, unicode.IsControl) >= 0:
			return Errorf(CodeInvalidArgument, "label %q holds invalid UTF-8 or a control character", l).
				WithHint("use printable characters")
		case seen[l]:
			return Errorf(CodeInvalidArgument, "label %q is given twice", l).WithHint("give each label once")
		}
		seen[l] = true
	}
	return nil
}
