package layertar

import (
	"strings"
	"testing"
)

// TestCleanName covers names archive/tar cannot deliver (a NUL byte) as
// well as those it can.
func TestCleanName(t *testing.T) {
	tests := []struct {
		name, rel string
		refused   bool
	}{
		{name: "etc/passwd", rel: "etc/passwd"},
		{name: "/etc/passwd", rel: "etc/passwd"},
		{name: "./etc//passwd/", rel: "etc/passwd"},
		{name: "./", rel: ""},
		{name: "/", rel: ""},
		{name: ".wh..wh..opq", rel: ".wh..wh..opq"},
		{name: "", refused: true},
		{name: "etc/pass\x00wd", refused: true},
		{name: "..", refused: true},
		{name: "../etc", refused: true},
		{name: "a/../b", refused: true},
		{name: "/../etc", refused: true},
		{name: "a/..", refused: true},
		{name: strings.Repeat("a", 4097), refused: true},
		{name: strings.Repeat("a", 4096), rel: strings.Repeat("a", 4096)},
	}
	for _, tt := range tests {
		rel, why := cleanName(tt.name)
		if tt.refused != (why != "") || rel != tt.rel {
			t.Errorf("cleanName(%q) = %q, %q; want %q, refused %v", tt.name, rel, why, tt.rel, tt.refused)
		}
	}
}
