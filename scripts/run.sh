#!/usr/bin/env bash
# Installs what is missing, then runs the hearth daemon in the foreground with
# its embedded defaults (data in /var/lib/hearth, API on 127.0.0.1:7077,
# gVisor when present). The first start builds the default image (~2 min).
# Extra arguments go to `hearth serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec bin/hearth serve "$@"
