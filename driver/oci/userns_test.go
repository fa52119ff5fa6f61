package oci_test

import (
	"os"
	"testing"

	"github.com/hearth/hearth/driver/oci"
)

// TestIDClaims: ranges are claimed host-wide, so two drivers of different
// state directories (two daemons) never get the same one; when all are
// taken a claim fails; a release frees one; Recover releases the claims of
// its own sandboxes that are not running, and never another daemon's.
func TestIDClaims(t *testing.T) {
	claims := t.TempDir()
	open := func() *oci.Driver {
		d, err := oci.New(oci.Options{Runtime: oci.RuntimeRunc, Binary: "/bin/true", StateDir: t.TempDir(), IDBase: 1 << 20, IDRanges: 2, IDClaimDir: claims})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	a, b := open(), open()
	baseA, err := a.ClaimIDs("one")
	if err != nil {
		t.Fatal(err)
	}
	baseB, err := b.ClaimIDs("one")
	if err != nil {
		t.Fatal(err)
	}
	if baseA == baseB || (baseA != 1<<20 && baseA != 1<<20+65536) || (baseB != 1<<20 && baseB != 1<<20+65536) {
		t.Errorf("claims = %d and %d, want the two distinct ranges from %d", baseA, baseB, 1<<20)
	}
	if _, err := a.ClaimIDs("two"); err == nil {
		t.Errorf("a third claim of two ranges succeeded")
	}
	if err := a.ReleaseIDs("one"); err != nil {
		t.Fatal(err)
	}
	if got, err := a.ClaimIDs("two"); err != nil || got != baseA {
		t.Errorf("claim after a release = %d, %v; want the released range %d", got, err, baseA)
	}
	// A daemon restart: a's "two" is not running, b's "one" is b's.
	a.RecoverIDs(map[string]bool{})
	left, _ := os.ReadDir(claims)
	if len(left) != 1 {
		t.Errorf("claims after a's Recover = %d, want 1 (b's)", len(left))
	}
	if _, err := a.ClaimIDs("three"); err != nil {
		t.Errorf("claim after Recover = %v, want the range Recover freed", err)
	}
	if _, err := oci.New(oci.Options{Runtime: oci.RuntimeRunc, Binary: "/bin/true", StateDir: t.TempDir(), IDBase: 0xffff0000, IDRanges: 2}); err == nil {
		t.Errorf("New with ranges past 2^32 = nil, want an error")
	}
}
