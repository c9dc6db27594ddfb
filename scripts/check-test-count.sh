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
# Tests labelled "script" (fixtures made by scripts, such as keras_fixtures) are no Catch2
# case. They are counted and taken off: -LE would not leave them out, since CTest adds back
# the fixture setups that the tests it lists require.
count() { ctest --test-dir "$build" -N "$@" | sed -n 's/^Total Tests: \([0-9]*\)$/\1/p'; }
ctest_total=$(( $(count) - $(count -L '^script$') ))
if [ "$ctest_total" != "$catch_total" ]; then
  echo "check-test-count: CTest has ${ctest_total:-no} tests, the Catch2 suites list $catch_total" >&2
  ctest --test-dir "$build" -N | grep -n ';' >&2 || true
  exit 1
fi
echo "check-test-count: $ctest_total tests, each Catch2 case once"
