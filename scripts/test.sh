#!/usr/bin/env bash
# Runs hearth's whole test suite as CI does: installs what is missing, checks
# formatting and vet, builds the default image once (cached), then runs every
# test, including the driver conformance suite against each installed runtime
# and the end-to-end tests that start a real daemon. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
export PATH=$PATH:/usr/local/go/bin

unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "gofmt needed on:" >&2; echo "$unformatted" >&2; exit 1
fi
go vet ./...
# bin/hearth is cmd/hearth built with the tag nokube (scripts/install.sh):
# it is vetted as built too.
go vet -tags nokube ./cmd/hearth
# scripts/runsc-seccomp, which builds the runsc every sandbox runs, is a
# module of its own: its test builds against the copy of gVisor it fills.
(cd scripts/runsc-seccomp && go vet . && GOFLAGS=-mod=mod go test -count=1 .)

# The default image is built once (debootstrap, ~1 min) and shared by the
# daemon tests and the driver conformance suite.
export HEARTH_IMAGE_CACHE=${HEARTH_IMAGE_CACHE:-/var/cache/hearth/images}
bin/hearth image build
export HEARTH_TEST_ROOTFS=$HEARTH_IMAGE_CACHE/default/rootfs
# Tests that need root, a runtime or the image fail instead of skipping.
export HEARTH_TEST_STRICT=1

go test -race -timeout 60m -count=1 ./...
# The rest of cmd/hearth's tests run the same code in both builds: only
# the hand-over's own test (kube_omitted_test.go) runs again, tagged.
go test -race -count=1 -tags nokube -run '^TestDaemonInClusterNeedsHearthKube$' ./cmd/hearth

# A short run of every fuzz test beyond its checked-in seeds (which the run
# above already replays): HEARTH_FUZZTIME each (10s by default; 0 skips).
fuzztime=${HEARTH_FUZZTIME:-10s}
# fuzz_once fuzzes target $2 of package $1 for $fuzztime.
fuzz_once() { go test -run '^$' -fuzz "^$2\$" -fuzztime "$fuzztime" "$1" 2>&1; }
if [ "$fuzztime" != 0 ]; then
	grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u | while read -r pkg; do
		for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$pkg"/*_test.go | cut -d' ' -f2); do
			echo "fuzz: $pkg $f ($fuzztime)"
			if out=$(fuzz_once "$pkg" "$f"); then
				continue
			fi
			# Go 1.26's fuzzing coordinator can report its own -fuzztime
			# deadline as a failure when a loaded machine starves its
			# workers (golang/go#75804, fixed in Go 1.27): such a run
			# found and wrote no failing input. It runs again, up to three
			# times in all (CI once saw two in a row); any other failure
			# fails the suite at once.
			for again in 2 3; do
				if ! grep -q 'context deadline exceeded' <<<"$out" || grep -q 'Failing input written' <<<"$out"; then
					break
				fi
				echo "fuzz: $pkg $f ended on the coordinator's own deadline; run $again of 3" >&2
				out=$(fuzz_once "$pkg" "$f") && continue 2
			done
			echo "$out" >&2
			exit 1
		done
	done
fi
