#!/usr/bin/env bash
# Installs what hearth needs on a Debian/Ubuntu host and builds it:
#   - apt packages: runc (container runtime), debootstrap (the default image),
#     btrfs-progs (the layer store), util-linux/mount, iproute2, iptables;
#   - gVisor's runsc, built static from the Go module proxy once and cached in
#     $HEARTH_CACHE (default /var/cache/hearth); linked into /usr/local/bin;
#   - bin/hearth and bin/hearth-agent (static) in the checkout.
# Safe to run again: it only does what is missing. Needs root and Go >= 1.26.
set -euo pipefail

cd "$(dirname "$0")/.."
cache=${HEARTH_CACHE:-/var/cache/hearth}
runsc_version=v0.0.0-20260905035102-160fafc42237

say() { printf 'install: %s\n' "$*" >&2; }

if [ "$(id -u)" != 0 ]; then
	say "run as root (hearth manages mounts, cgroups and runtimes)"; exit 1
fi
if ! command -v go >/dev/null; then
	export PATH=$PATH:/usr/local/go/bin
fi
command -v go >/dev/null || { say "Go is missing: install Go 1.26 or newer (https://go.dev/doc/install)"; exit 1; }

need=()
for pair in runc:runc debootstrap:debootstrap mkfs.btrfs:btrfs-progs losetup:mount ip:iproute2 iptables:iptables; do
	cmd=${pair%%:*} pkg=${pair#*:}
	command -v "$cmd" >/dev/null || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
	say "apt-get install ${need[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

mkdir -p "$cache/bin"
runsc=$cache/bin/runsc
if [ ! -x "$runsc" ] || [ "$(cat "$cache/bin/runsc.version" 2>/dev/null)" != "$runsc_version" ]; then
	say "building gVisor runsc $runsc_version (static; about 10 minutes on 2 cores the first time, cached after)"
	CGO_ENABLED=0 GOBIN="$cache/bin" go install "gvisor.dev/gvisor/runsc@$runsc_version"
	echo "$runsc_version" > "$cache/bin/runsc.version"
fi
ln -sf "$runsc" /usr/local/bin/runsc

say "building bin/hearth and bin/hearth-agent"
mkdir -p bin
CGO_ENABLED=0 go build -trimpath -o bin/hearth ./cmd/hearth
CGO_ENABLED=0 go build -trimpath -o bin/hearth-agent ./cmd/hearth-agent
