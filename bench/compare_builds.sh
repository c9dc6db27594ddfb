#!/usr/bin/env bash
# This build against another (BASE_BIN: a build directory's bin/, e.g. of main before a
# change), alternated ROUNDS times in one run on the same data: each case's examples/s on
# both sides, and the ratio of the medians (this / base). One JSON line per run, then per
# case one line per side and one ratio line.
#   fmnist_ps        fmnist_ps under troupe launch --ps 2 --workers 2 (938 steps a worker)
#   fmnist_mirrored  fmnist_mirrored under troupe launch --workers 2 (938 steps)
#   ctr_small        ctr_ps, DeepFM dim 8, 64-64, batch 512, 1600 steps a worker, 2 PS x 2
#   ctr_wide         ctr_ps, DeepFM dim 16, 400-400-400, batch 1024, 300 steps a worker
#   train_deepfm     troupe train (one process) of compare_graph_engine.sh's small DeepFM
#                    .keras file, batch 512, 1600 steps
#   train_wide_deep  troupe train of keras_ctr_models.py's Wide&Deep, batch 512, 800 steps
#   train_cnn        troupe train of keras_ctr_models.py's CNN on Fashion-MNIST, batch 64,
#                    600 steps
#   BASE_BIN (required), CASES (all), ROUNDS (3), WORK (/tmp/troupe-keras-bench, shared with
#   the other comparisons), FMNIST (the IDX directory), LOCK (a flock file; empty: none).
# troupe train's examples/s is its training window's (steps x batch / epoch_s); the
# programs' their own over their training window.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../build/bin}
base=${BASE_BIN:?give BASE_BIN, the other build\'s bin directory}
kpy=${KERASPY:-$here/../build/keras-venv/bin/python}
rounds=${ROUNDS:-3}
work=${WORK:-/tmp/troupe-keras-bench}
fmnist=${FMNIST:-/usr/share/datasets/fashion-mnist}
cases=${CASES:-"fmnist_ps fmnist_mirrored ctr_small ctr_wide train_deepfm train_wide_deep train_cnn"}
lock=${LOCK-/tmp/troupe-build.lock}
# shellcheck source=bench/lib.sh
source "$here/lib.sh"
mkdir -p "$work"
wd_data() {
  [ -f "$1/teacher.json" ] || "$kpy" "$here/wide_deep_data.py" --out "$1" --rows 200000 >/dev/null 2>&1
}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
run_case() {  # case bin: the run's last JSON line
  local c=$1 b=$2
  case "$c" in
    fmnist_ps)
      locked "$b/troupe" launch --ps 2 --workers 2 -- "$b/fmnist_ps" --data-dir "$fmnist" \
        --steps-per-worker 938 2>/dev/null | tail -1 ;;
    fmnist_mirrored)
      locked "$b/troupe" launch --workers 2 -- "$b/fmnist_mirrored" --data-dir "$fmnist" \
        --steps 938 2>/dev/null | tail -1 ;;
    ctr_small)
      locked "$b/troupe" launch --ps 2 --workers 2 -- "$b/ctr_ps" --data "$work/ctr_small" \
        --format tfrecord --batch 512 --steps-per-worker 1600 --dim 8 --hidden 64 --hidden 64 \
        --buckets-per-field 4096 --lr 0.2 2>/dev/null | tail -1 ;;
    ctr_wide)
      locked "$b/troupe" launch --ps 2 --workers 2 -- "$b/ctr_ps" --data "$work/ctr_wide" \
        --format tfrecord --batch 1024 --steps-per-worker 300 --dim 16 --hidden 400 \
        --hidden 400 --hidden 400 --buckets-per-field 65536 --lr 0.05 2>/dev/null | tail -1 ;;
    train_deepfm)
      locked "$b/troupe" train --model "$work/deepfm_small.keras" \
        --data "$work"/ctr_small/train-*.tfrecord --format tfrecord --batch 512 --steps 1600 \
        2>/dev/null | tail -1 ;;
    train_wide_deep)
      locked "$b/troupe" train --model "$work/wide_deep.keras" \
        --data "$work"/wd/train-*.tfrecord --format tfrecord --batch 512 --steps 800 \
        2>/dev/null | tail -1 ;;
    train_cnn)
      locked "$b/troupe" train --model "$work/cnn.keras" --data "$fmnist" --format idx \
        --batch 64 --steps 600 --shuffle 10000 2>/dev/null | tail -1 ;;
    *) echo "unknown case $c" >&2; exit 2 ;;
  esac
}
for c in $cases; do
  case "$c" in
    ctr_small|train_deepfm)
      ctr_data "$work/ctr_small" 50 4096
      keras_file deepfm_small deepfm --buckets 4096 --dim 8 --hidden 64 64 --lr 0.2 >/dev/null ;;
    ctr_wide) ctr_data "$work/ctr_wide" 1000 65536 ;;
    train_wide_deep)
      wd_data "$work/wd"
      keras_file wide_deep wide_deep --buckets 4096 --dim 8 --hidden 64 64 --lr 0.2 >/dev/null ;;
    train_cnn) keras_file cnn cnn >/dev/null ;;
  esac
  for r in $(seq "$rounds"); do
    for side in base this; do
      b=$bin
      [ "$side" = base ] && b=$base
      line=$(run_case "$c" "$b")
      [ -n "$line" ] || line='{"ok":false}'
      echo "{\"bench\":\"builds\",\"case\":\"$c\",\"side\":\"$side\",\"round\":$r,\"run\":$line}" | tee -a "$out"
    done
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]


def result(r):
    run = r["run"]
    return run.get("chief", run)  # troupe launch puts the chief's line under "chief"


def speed(r):
    res = result(r)
    if not res.get("ok", False):
        return None
    if r["case"].startswith("train_"):
        return res["steps"] * res["batch"] / res["epoch_s"]
    return res["examples_per_sec"]


for case in dict.fromkeys(r["case"] for r in rows):
    med = {}
    for side in ("base", "this"):
        speeds = [speed(r) for r in rows if r["case"] == case and r["side"] == side]
        ok = [s for s in speeds if s is not None]
        med[side] = statistics.median(ok) if ok else None
        print(json.dumps({"bench": "builds", "case": case, "side": side,
                          "examples_per_sec": [round(s) if s else None for s in speeds],
                          "examples_per_sec_median": round(med[side]) if ok else None}))
    ratio = med["this"] / med["base"] if med["this"] and med["base"] else None
    print(json.dumps({"bench": "builds_ratio", "case": case,
                      "this_over_base": round(ratio, 3) if ratio else None}))
PY
