#!/usr/bin/env bash
# Runs every fuzz target of the module, one after another, each for the
# given duration (default 1m; any value go test -fuzztime takes, such as
# 10m or 50000x), and prints the executions of each at the end.
#
#   scripts/fuzz.sh [duration] [target-regexp]
#
# FUZZ_MINIMIZE_TIME (default 5s) bounds the minimization of each new
# interesting input.
#
# A failure stops at the first crasher: go test writes it to
# testdata/fuzz/<Target>/ in its package, where every later go test runs it
# as a regression seed. Fix the bug and commit the file.
set -euo pipefail
cd "$(dirname "$0")/.."

duration="${1:-1m}"
only="${2:-.}"
# go test spends up to a minute minimizing each new interesting input by
# default, which for targets with inputs of kilobytes (FuzzCheckPages,
# FuzzVerify) leaves almost no time to fuzz.
minimize="${FUZZ_MINIMIZE_TIME:-5s}"
summary=()
for pkg in $(go list ./...); do
  for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    [[ "$target" =~ $only ]] || continue
    echo "== $pkg $target ($duration)"
    log=$(mktemp)
    # -run matches no test, so only the fuzz target runs; the seed corpus
    # runs first.
    if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$duration" -fuzzminimizetime "$minimize" "$pkg" 2>&1 | tee "$log"; then
      echo "fuzz: $target failed; the crasher is in $(go list -f '{{.Dir}}' "$pkg")/testdata/fuzz/$target/" >&2
      rm -f "$log"
      exit 1
    fi
    execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    summary+=("$(printf '%-28s %-45s %12s execs' "$target" "$pkg" "${execs:-?}")")
    rm -f "$log"
  done
done
echo
echo "fuzzed for $duration each:"
printf '%s\n' "${summary[@]}"
