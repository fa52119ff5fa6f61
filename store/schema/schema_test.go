package schema_test

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/hearth/hearth/store/schema"
)

func TestParse(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	tests := []struct {
		name    string
		files   fstest.MapFS
		want    []string // names, in order
		wantErr string
	}{
		{"ordered", fstest.MapFS{
			"m/0002_b.sql": file("B"), "m/0001_a.sql": file("A"), "m/README": file("x"),
		}, []string{"0001_a.sql", "0002_b.sql"}, ""},
		{"empty", fstest.MapFS{"m/README": file("x")}, nil, ""},
		{"gap", fstest.MapFS{"m/0001_a.sql": file("A"), "m/0003_c.sql": file("C")}, nil, "0003_c.sql: want a name starting 0002_"},
		{"duplicate", fstest.MapFS{"m/0001_a.sql": file("A"), "m/0001_b.sql": file("B")}, nil, "0001_b.sql"},
		{"unnumbered", fstest.MapFS{"m/init.sql": file("A")}, nil, "init.sql"},
		{"zero", fstest.MapFS{"m/0000_a.sql": file("A")}, nil, "0000_a.sql"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			migs, err := schema.Parse(tt.files, "m")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse = %v", err)
			}
			var got []string
			for i, m := range migs {
				got = append(got, m.Name)
				if m.Version != i+1 {
					t.Errorf("migration %s version = %d, want %d", m.Name, m.Version, i+1)
				}
				if m.SQL != strings.ToUpper(m.Name[5:6]) {
					t.Errorf("migration %s SQL = %q, want its file's text", m.Name, m.SQL)
				}
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("Parse = %q, want %q", got, tt.want)
			}
		})
	}
}
