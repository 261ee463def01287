#!/usr/bin/env bash
# Runs every Fuzz* target in the module for a bounded time each (default 10s). Minimizing a
# newly interesting input is capped at 5s (go test's default is 60s, which can take a short
# run's whole time on a slow target and shows as "0/sec" while it lasts).
set -euo pipefail
t=${1:-10s}
cd "$(dirname "$0")/.."
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | awk '{print $2}' | sort -u); do
    echo "== $pkg $f ($t)"
    go test -run '^$' -fuzz "^${f}\$" -fuzztime "$t" -fuzzminimizetime 5s "$pkg"
  done
done
