#!/usr/bin/env bash
# Makes the Python virtual environment in which the tests run real Keras (the reference
# that Troupe's Keras support is compared with): Keras 3 on the JAX backend (CPU only),
# h5py, numpy and pytest, at pinned versions; and TensorFlow's CPU package, without which
# Keras 3's Hashing, StringLookup and IntegerLookup layers refuse to exist (their
# reference bins and indices come from it; about 1.3 GB of the environment's 2.1 GB).
# Idempotent: returns at once when DIR holds a complete environment of these versions
# (a stamp written after the last install step says so); otherwise DIR is made anew
# (about 70 s and 2.1 GB from PyPI). Uses $PYTHON (default python3, 3.11 or later).
# Usage: scripts/keras-venv.sh [DIR]      (default build/keras-venv)
set -euo pipefail
dir="${1:-build/keras-venv}"
python="${PYTHON:-python3}"

requirements=(
  keras==3.15.1
  "jax[cpu]==0.10.2" jaxlib==0.10.2
  h5py==3.14.0
  numpy==2.4.6
  pytest==9.2.0
  tensorflow-cpu==2.21.0
)
stamp="$dir/troupe-requirements.txt"
want=$(printf '%s\n' "${requirements[@]}")

complete() {
  [ -x "$dir/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] &&
    "$dir/bin/python" -c '' 2>/dev/null
}

complete && exit 0
mkdir -p "$(dirname "$dir")"
# CTest may start two users of the environment at once: one installs, the other waits.
exec 9>"$dir.lock"
flock 9
complete && exit 0

"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "keras-venv: $python is $("$python" --version 2>&1); Keras $(echo "${requirements[0]}" | cut -d= -f3) with JAX needs Python 3.11 or later (set PYTHON)" >&2
  exit 1
}
echo "keras-venv: installing ${requirements[*]} into $dir" >&2
rm -rf "$dir"
"$python" -m venv "$dir"
"$dir/bin/python" -m pip install --quiet --disable-pip-version-check --no-input "${requirements[@]}"
printf '%s\n' "$want" > "$stamp"
