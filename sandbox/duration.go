package sandbox

import (
	"encoding/json"
	"time"
)

// Duration is a time.Duration that travels in JSON as a Go duration string
// ("90s", "1h30m") and also accepts a number of seconds.
type Duration time.Duration

// MarshalJSON renders d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON accepts "1h30m" or 5400 (seconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var secs float64
	if err := json.Unmarshal(b, &secs); err == nil {
		*d = Duration(secs * float64(time.Second))
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return Errorf(CodeInvalidArgument, "invalid duration %s", b).WithHint("use a string such as \"90s\" or a number of seconds")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return Errorf(CodeInvalidArgument, "invalid duration %q", s).WithHint("use a string such as \"90s\" or \"1h30m\"")
	}
	*d = Duration(v)
	return nil
}
