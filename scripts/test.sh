#!/usr/bin/env bash
# The project's test command (see README): every package, with the race detector.
set -euo pipefail
cd "$(dirname "$0")/.."
exec go test -race -count=1 -timeout 25m ./... "$@"
