#!/usr/bin/env bash
# ctr_ps of this build against ctr_ps of another build (BASE_BIN: a build directory's bin/,
# e.g. of the commit before a change), alternated ROUNDS times in one run on the same data,
# 2 PS tasks x 2 workers: each side's examples/s (ctr_ps's own, over its training window)
# and held-out AUC. Prints one JSON line per run, then per case one line per side (its runs
# and median) and the ratio of the medians (this build / base).
#   small  DeepFM dim 8, 64-64, batch 512, 1600 steps a worker, 4096 buckets, Adagrad 0.2
#   wide   DeepFM dim 16, 400-400-400, batch 1024, 300 steps a worker, 65536 buckets, 0.05
#   BASE_BIN (required), CASES ("small wide"), ROUNDS (5), PRECISION (float32),
#   WORK (/tmp/troupe-keras-bench: compare_graph_engine.sh's data), LOCK (a flock file),
#   PROGRAM (ctr_ps; or ctr_fit: the same model, data and steps through fit(), one epoch
#   of twice the steps a worker takes).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../build/bin}
base=${BASE_BIN:?give BASE_BIN, the other build\'s bin directory}
rounds=${ROUNDS:-5}
cases=${CASES:-"small wide"}
program=${PROGRAM:-ctr_ps}
precision=${PRECISION:-float32}
work=${WORK:-/tmp/troupe-keras-bench}
lock=${LOCK-/tmp/troupe-build.lock}
# shellcheck source=bench/lib.sh
source "$here/lib.sh"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for c in $cases; do
  case "$c" in
    small) data=$work/ctr_small; ctr_data "$data" 50 4096
      args="--batch 512 --steps-per-worker 1600 --dim 8 --hidden 64 --hidden 64 --buckets-per-field 4096 --lr 0.2" ;;
    wide) data=$work/ctr_wide; ctr_data "$data" 1000 65536
      args="--batch 1024 --steps-per-worker 300 --dim 16 --hidden 400 --hidden 400 --hidden 400 --buckets-per-field 65536 --lr 0.05" ;;
    *) echo "unknown case $c" >&2; exit 2 ;;
  esac
  if [ "$program" = ctr_fit ]; then  # fit(): the job's steps in one epoch, both workers'
    per_worker=$(echo "$args" | sed -E 's/.*--steps-per-worker ([0-9]+).*/\1/')
    args="$(echo "$args" | sed -E 's/--steps-per-worker [0-9]+//') --epochs 1 --steps-per-epoch $((2 * per_worker))"
  fi
  for r in $(seq "$rounds"); do
    for side in base this; do
      b=$bin
      [ "$side" = base ] && b=$base
      # shellcheck disable=SC2086
      line=$(locked "$b/troupe" launch --ps 2 --workers 2 -- "$b/$program" --data "$data" \
        --format tfrecord $args --precision "$precision" 2>/dev/null | tail -1)
      echo "{\"bench\":\"ctr_builds\",\"program\":\"$program\",\"case\":\"$c\",\"side\":\"$side\",\"round\":$r,\"run\":$line}" | tee -a "$out"
    done
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for case in dict.fromkeys(r["case"] for r in rows):
    med = {}
    for side in ("base", "this"):
        rs = [r["run"]["chief"] for r in rows if r["case"] == case and r["side"] == side]
        speeds = [c["examples_per_sec"] for c in rs]
        med[side] = statistics.median(speeds)
        print(json.dumps({"bench": "ctr_builds", "case": case, "side": side,
                          "examples_per_sec": [round(v) for v in speeds],
                          "examples_per_sec_median": round(med[side]),
                          "auc": [round(c["auc"], 4) for c in rs]}))
    print(json.dumps({"bench": "ctr_builds_ratio", "case": case,
                      "this_over_base": round(med["this"] / med["base"], 3)}))
PY
