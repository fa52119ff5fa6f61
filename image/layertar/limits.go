package layertar

import "fmt"

// The defaults of Limits' fields.
const (
	DefaultMaxBytes    = 32 << 30 // 32 GiB
	DefaultMaxFileSize = 64 << 30 // 64 GiB: a sparse /var/log/lastlog can be tens of GiB
	DefaultMaxEntries  = 1 << 20
)

// Limits bound what one Apply may do. A field that is zero or negative
// takes its default.
type Limits struct {
	// MaxBytes bounds the bytes of the uncompressed tar stream Apply
	// reads: headers, padding and file content. The holes of a sparse
	// entry are not in the stream and do not count, so this bounds the disk
	// an Apply can fill and the data a decompression bomb can make it
	// read. Default DefaultMaxBytes.
	MaxBytes int64
	// MaxFileSize bounds the size of one file as it appears (a sparse
	// file's holes included). Default DefaultMaxFileSize.
	MaxFileSize int64
	// MaxEntries bounds the entries of the tar, whiteouts and skipped ones
	// included. Default DefaultMaxEntries.
	MaxEntries int64
}

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxFileSize <= 0 {
		l.MaxFileSize = DefaultMaxFileSize
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultMaxEntries
	}
	return l
}

// maxNotes bounds Stats.Skipped: a layer of a million device nodes gets a
// hundred notes and a count of the rest, not a million strings.
const maxNotes = 100

// Stats counts what an Apply or a Write did.
type Stats struct {
	Entries   int64 // tar entries read (Apply) or written (Write)
	Files     int64 // regular files
	Dirs      int64 // directories
	Symlinks  int64 // symbolic links
	Hardlinks int64 // hard links
	Whiteouts int64 // whiteouts and opaque markers (Apply)
	Bytes     int64 // file content written: to disk, holes not counted (Apply), or to the tar (Write)
	// Skipped notes what was left out, one line each, such as
	// "dev/null: device node skipped"; past 100 notes the rest are
	// counted in a last line.
	Skipped []string

	dropped int64 // notes past maxNotes
}

// note records a skipped entry or attribute.
func (s *Stats) note(path, what string) {
	if len(s.Skipped) < maxNotes {
		s.Skipped = append(s.Skipped, path+": "+what)
		return
	}
	s.dropped++
}

// done returns s with the count of the notes past maxNotes, if any, as its
// last note.
func (s Stats) done() Stats {
	if s.dropped > 0 {
		s.Skipped = append(s.Skipped, fmt.Sprintf("and %d more skipped", s.dropped))
		s.dropped = 0
	}
	return s
}
