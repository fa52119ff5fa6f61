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

# The default image is built once (debootstrap, ~1 min) and shared by the
# daemon tests and the driver conformance suite.
export HEARTH_IMAGE_CACHE=${HEARTH_IMAGE_CACHE:-/var/cache/hearth/images}
bin/hearth image build
export HEARTH_TEST_ROOTFS=$HEARTH_IMAGE_CACHE/default/rootfs
# Tests that need root, a runtime or the image fail instead of skipping.
export HEARTH_TEST_STRICT=1

go test -race -timeout 60m -count=1 ./...

# A short run of every fuzz test beyond its checked-in seeds (which the run
# above already replays): HEARTH_FUZZTIME each (10s by default; 0 skips).
fuzztime=${HEARTH_FUZZTIME:-10s}
if [ "$fuzztime" != 0 ]; then
	grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u | while read -r pkg; do
		for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$pkg"/*_test.go | cut -d' ' -f2); do
			echo "fuzz: $pkg $f ($fuzztime)"
			if ! out=$(go test -run '^$' -fuzz "^$f\$" -fuzztime "$fuzztime" "$pkg" 2>&1); then
				echo "$out" >&2
				exit 1
			fi
		done
	done
fi
