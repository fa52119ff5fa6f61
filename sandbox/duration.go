package sandbox

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

// Duration is a time.Duration that travels in JSON as a Go duration string
// ("90s", "1h30m") and also accepts a number of seconds.
type Duration time.Duration

// MaxDuration is the longest Duration, about 292 years: a longer one does
// not fit in a time.Duration.
const MaxDuration = Duration(math.MaxInt64)

// MarshalJSON renders d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON accepts "1h30m" or 5400 (seconds). A duration beyond
// ±MaxDuration (1e30 seconds, "9999999h") is invalid_argument saying it is
// too long, with the limit in details.max_seconds: converted, it would wrap
// around and pass for a negative or a short one.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var secs float64
	if err := json.Unmarshal(b, &secs); err == nil {
		// float64(math.MaxInt64) rounds up to 2^63, which no longer fits:
		// the comparison must exclude it.
		ns := secs * float64(time.Second)
		if math.IsNaN(ns) || ns >= float64(math.MaxInt64) || ns <= float64(math.MinInt64) {
			return durationTooLong(string(b))
		}
		*d = Duration(ns)
		return nil
	} else if isRange(err) {
		return durationTooLong(string(b))
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return Errorf(CodeInvalidArgument, "invalid duration %s", b).WithHint("use a string such as \"90s\" or a number of seconds")
	}
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// ParseDuration reads a Go duration string ("90s", "1h30m") as
// time.ParseDuration does. Errors are invalid_argument: one beyond
// ±MaxDuration says it is too long, with the limit in details.max_seconds.
func ParseDuration(s string) (Duration, error) {
	v, err := time.ParseDuration(s)
	if err != nil {
		if overflows(s) {
			return 0, durationTooLong(strconv.Quote(s))
		}
		return 0, Errorf(CodeInvalidArgument, "invalid duration %q", s).WithHint("use a string such as \"90s\" or \"1h30m\"")
	}
	return Duration(v), nil
}

// durationTooLong is the error of a duration beyond MaxDuration.
func durationTooLong(text string) error {
	limit := int64(time.Duration(MaxDuration) / time.Second)
	return Errorf(CodeInvalidArgument, "duration %s is too long: a duration is at most %d seconds (%s, about 292 years)", text, limit, time.Duration(MaxDuration)).
		With("max_seconds", limit).
		WithHint("give a shorter duration, such as \"1h\" or 3600")
}

// isRange reports whether err is encoding/json's answer to a number too
// large for a float64 (1e400).
func isRange(err error) bool {
	var ute *json.UnmarshalTypeError
	if errors.As(err, &ute) {
		return strings.HasPrefix(ute.Value, "number")
	}
	return false
}

// overflows reports whether s, which time.ParseDuration refused, was
// refused for its size alone: with each run of digits shortened to "1"
// ("99999999999h" → "1h", "1.5.5h" → "1.1.1h") it parses.
func overflows(s string) bool {
	var b strings.Builder
	digits := false
	for _, r := range s {
		isDigit := r >= '0' && r <= '9'
		switch {
		case isDigit && !digits:
			b.WriteByte('1')
		case !isDigit:
			b.WriteRune(r)
		}
		digits = isDigit
	}
	_, err := time.ParseDuration(b.String())
	return err == nil
}
