// Package schema reads a SQL store's schema history: migrations embedded
// in the binary as files named NNNN_what.sql, numbered from 0001 without
// gaps. Each store applies them in its own way (store/sqlite,
// store/postgres); this package only reads and checks them.
package schema

import (
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// Migration is one step of a schema; applying it takes the database from
// Version-1 to Version.
type Migration struct {
	Version int
	// Name is the file's name, e.g. 0003_images.sql.
	Name string
	SQL  string
}

// Parse reads dir's *.sql files in fsys as migrations, in file-name order
// (other files are ignored). Their numbers must run 1, 2, 3…: a gap, a
// repeated number or a name without one is an error naming the file.
func Parse(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var migs []Migration
	for _, e := range entries { // ReadDir sorts by name
		if e.IsDir() || path.Ext(e.Name()) != ".sql" {
			continue
		}
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v != len(migs)+1 {
			return nil, fmt.Errorf("migration %s: want a name starting %04d_", e.Name(), len(migs)+1)
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		migs = append(migs, Migration{Version: v, Name: e.Name(), SQL: string(b)})
	}
	return migs, nil
}
