#!/usr/bin/env bash
# Makes the Keras test fixtures: the environment (scripts/keras-venv.sh VENV), then
# tests/keras/make_fixtures.py into OUT. Returns at once when OUT already holds the
# fixtures of these scripts made in an environment of these versions (a stamp written after
# the last fixture says so); otherwise OUT is made anew. CI's sanitized build uses the plain
# build's fixtures, so they are made once a run (about 110 s).
# Usage: scripts/keras-fixtures.sh VENV OUT
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=$1
out=$2
"$here/keras-venv.sh" "$venv"
stamp="$out/troupe-fixtures.sha256"
want=$(cat "$venv/troupe-requirements.txt" "$here"/../tests/keras/*.py | sha256sum | cut -d' ' -f1)
current() { [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; }
mkdir -p "$(dirname "$out")"
exec 9>"$out.lock"
flock 9
if current; then
  echo "keras-fixtures: $out is current" >&2
  exit 0
fi
rm -rf "$out"
"$venv/bin/python" "$here/../tests/keras/make_fixtures.py" "$out"
echo "$want" > "$stamp"
