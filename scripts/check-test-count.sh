#!/usr/bin/env bash
# Every Catch2 case must reach CTest as one test: a name that CMake splits (a ';' in it)
# or a suite that is not discovered would otherwise run nothing and pass unnoticed.
# Usage: scripts/check-test-count.sh BUILD_DIR
set -euo pipefail
build="${1:-build}"
catch_total=0
for exe in "$build"/bin/*_tests; do
  [ -x "$exe" ] || continue
  n=$("$exe" --list-test-names-only | grep -c . || true)
  catch_total=$((catch_total + n))
done
# Tests labelled "script" (fixtures made by scripts, such as keras_fixtures) are no Catch2 case.
ctest_total=$(ctest --test-dir "$build" -N -LE '^script$' | sed -n 's/^Total Tests: \([0-9]*\)$/\1/p')
if [ "$ctest_total" != "$catch_total" ]; then
  echo "check-test-count: CTest has ${ctest_total:-no} tests, the Catch2 suites list $catch_total" >&2
  ctest --test-dir "$build" -N | grep -n ';' >&2 || true
  exit 1
fi
echo "check-test-count: $ctest_total tests, each Catch2 case once"
