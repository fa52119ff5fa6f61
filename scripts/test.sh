#!/usr/bin/env bash
# Runs hearth's whole test suite as CI does: installs what is missing, checks
# formatting and vet, then runs every test, including the driver conformance
# suite against each installed runtime and the end-to-end tests that start a
# real daemon. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
export PATH=$PATH:/usr/local/go/bin

unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "gofmt needed on:" >&2; echo "$unformatted" >&2; exit 1
fi
go vet ./...
# The default image is built once (debootstrap, ~2 min) and shared by the tests.
export HEARTH_IMAGE_CACHE=${HEARTH_IMAGE_CACHE:-/var/cache/hearth/images}
go test -race -timeout 45m -count=1 ./... 2>&1 | tee /tmp/hearth-test.log
