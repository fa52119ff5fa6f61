package dockerfile

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"io"
)

// keyVersion changes when what a key covers changes, so that no old key
// names a root made by other rules.
const keyVersion = "hearth-dockerfile-key/1"

// keyWriter feeds a hash an unambiguous encoding: every string and list
// is preceded by its length, and fields come in a fixed order, so that
// different values (file names with any bytes included) never encode
// alike.
type keyWriter struct{ h hash.Hash }

func (k keyWriter) num(n uint64) {
	var b [binary.MaxVarintLen64]byte
	k.h.Write(b[:binary.PutUvarint(b[:], n)])
}

func (k keyWriter) str(s string) {
	k.num(uint64(len(s)))
	io.WriteString(k.h, s)
}

func (k keyWriter) strs(ss []string) {
	k.num(uint64(len(ss)))
	for _, s := range ss {
		k.str(s)
	}
}

func (k keyWriter) sum() string { return hex.EncodeToString(k.h.Sum(nil)) }

// baseKey is the key the first step chains from: the base image.
func baseKey(from, digest string) string {
	k := keyWriter{sha256.New()}
	k.strs([]string{keyVersion, "base", from, digest})
	return k.sum()
}

// stepKey is st's key after prev (see Resolve). Of a Copy's Owner it
// covers the names as written, not the IDs an executor fills in later.
func stepKey(prev string, st *Step) string {
	k := keyWriter{sha256.New()}
	k.strs([]string{keyVersion, "step", prev, st.Kind, st.Expanded})
	k.strs(st.Env)
	k.strs([]string{st.WorkDir, st.User})
	k.num(uint64(len(st.Copies)))
	for _, c := range st.Copies {
		owner, chmod := "", uint64(1<<32) // 1<<32: no --chmod
		if c.Owner != nil {
			owner = "chown " + c.Owner.String()
		}
		if c.Chmod != nil {
			chmod = uint64(*c.Chmod)
		}
		k.strs([]string{c.Source, c.Dest, owner})
		k.num(chmod)
		if c.Unpack {
			k.num(1)
		} else {
			k.num(0)
		}
		k.num(uint64(len(c.Entries)))
		for _, e := range c.Entries {
			k.strs([]string{e.Name, e.Path, e.Type, e.Digest, e.Link})
			k.num(uint64(e.Mode))
			k.num(uint64(e.Size))
		}
	}
	return k.sum()
}
