#!/usr/bin/env bash
# The docker-compose deployment, run for real on this machine (docs/deployment.md, "Running it
# here"): as root, `bash scripts/compose-smoke.sh`. Every step is in scripts/compose_smoke.py,
# which needs only Python's standard library.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 scripts/compose_smoke.py "$@"
