#!/bin/sh
# Vendors xterm.js, the web console's terminal, from npm into
# console/assets/vendor/xterm (committed: the console needs no npm at run
# or build time). Run it from the repository's root to change the
# versions below; it needs npm.
set -eu
xterm=6.0.0
fit=0.11.0
dst=console/assets/vendor/xterm
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "@xterm/xterm@$xterm" "@xterm/addon-fit@$fit" >/dev/null)
mkdir -p "$tmp/xterm" "$tmp/fit" "$dst"
tar xzf "$tmp/xterm-xterm-$xterm.tgz" -C "$tmp/xterm"
tar xzf "$tmp/xterm-addon-fit-$fit.tgz" -C "$tmp/fit"
# The source maps are not vendored; their references go too.
sed '/^\/\/# sourceMappingURL=/d' "$tmp/xterm/package/lib/xterm.js" > "$dst/xterm.js"
sed '/^\/\/# sourceMappingURL=/d' "$tmp/fit/package/lib/addon-fit.js" > "$dst/addon-fit.js"
cp "$tmp/xterm/package/css/xterm.css" "$tmp/xterm/package/LICENSE" "$dst/"
echo "@xterm/xterm $xterm, @xterm/addon-fit $fit (MIT, see LICENSE)" > "$dst/VERSION"
