#!/usr/bin/env bash
# Installs Troupe from BUILD_DIR into a fresh prefix (cmake --install), builds the job of
# tests/install/job outside the tree against it (find_package(Troupe)), and runs it as a
# local cluster under the installed troupe launch (1 PS, 2 workers). Prints launch's JSON
# line last; everything it made is removed.
# Usage: tests/install/run.sh BUILD_DIR
set -uo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/troupe-install-XXXXXX)
trap 'rm -rf "$work"' EXIT

step() {  # step NAME COMMAND...: runs it, its output to a log shown on failure
  if ! "${@:2}" > "$work/$1.log" 2>&1; then
    tail -30 "$work/$1.log" >&2
    echo "{\"ok\":false,\"failed\":\"$1\"}"
    exit 1
  fi
}
step install cmake --install "$build" --prefix "$work/prefix"
# The build's own compiler: a sanitized Troupe (clang's runtimes) takes its users' code with
# the same one.
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
step configure cmake -S "$src/tests/install/job" -B "$work/job" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" ${cxx:+-DCMAKE_CXX_COMPILER="$cxx"}
step build cmake --build "$work/job" -j2
# The headers came from the prefix, not the source tree.
grep -q "$work/prefix/include/troupe-" "$work/job/CMakeFiles/installed_job.dir/flags.make" \
  || { echo "{\"ok\":false,\"failed\":\"headers not from the prefix\"}"; exit 1; }
"$work/prefix/bin/troupe" launch --ps 1 --workers 2 --run-dir "$work/run" \
  -- "$work/job/installed_job" 2> "$work/launch.err" | tail -1
