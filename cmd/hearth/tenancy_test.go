package main

import "testing"

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1024", 1024, true},
		{"512MiB", 512 << 20, true},
		{"64GiB", 64 << 30, true},
		{"64G", 64 << 30, true},
		{"1.5GiB", 3 << 29, true},
		{"2TiB", 2 << 40, true},
		{"4k", 4 << 10, true},
		{"", 0, false},
		{"GiB", 0, false},
		{"-1GiB", 0, false},
		{"12XB", 0, false},
		{"1.2.3G", 0, false},
	} {
		got, err := parseBytes(tc.in)
		if (err == nil) != tc.ok || tc.ok && got != tc.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
