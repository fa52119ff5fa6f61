package sqlite

import (
	"database/sql"
	"fmt"
	"time"
)

// timeLayout is how every time is stored: UTC, fixed width, nanoseconds. A
// fixed width makes text order time order, which ORDER BY and range
// queries rely on.
const timeLayout = "2006-01-02T15:04:05.000000000Z"

// formatTime renders t in timeLayout. Years outside 0–9999 would break the
// fixed width, so they are refused.
func formatTime(t time.Time) (string, error) {
	t = t.UTC()
	if y := t.Year(); y < 0 || y > 9999 {
		return "", fmt.Errorf("time %s is outside years 0000-9999", t)
	}
	return t.Format(timeLayout), nil
}

// formatNullTime is formatTime with the zero time ("never") stored as NULL.
func formatNullTime(t time.Time) (any, error) {
	if t.IsZero() {
		return nil, nil
	}
	return formatTime(t)
}

// parseTime reads a time written by formatTime; it comes back in UTC.
func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(timeLayout, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("stored time %q: %w", s, err)
	}
	return t.UTC(), nil
}

// parseNullTime reads a time written by formatNullTime; NULL is the zero time.
func parseNullTime(s sql.NullString) (time.Time, error) {
	if !s.Valid {
		return time.Time{}, nil
	}
	return parseTime(s.String)
}
