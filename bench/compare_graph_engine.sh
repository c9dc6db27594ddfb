#!/usr/bin/env bash
# Troupe's graph engine (`troupe train` on a .keras file) against the hand-wired programs
# that train the same model, alternated ROUNDS times in one run, same data, batch, steps and
# optimizer; each side's examples/s over its training window (the hand-wired programs'
# train_s; troupe train's epoch_s, without the validation after it) and its held-out metric.
# Prints one JSON line per run, then per comparison one line per side and one ratio line
# (graph engine median / hand-wired median).
#   mlp_ps        .keras MLP 784-128-10 (SGD 0.1, batch 64) under troupe launch --ps 2
#                 --workers 2, against fmnist_ps (its defaults: batch 64, lr 0.1, shuffle 10000)
#   mlp_mirrored  the same under troupe launch --workers 2 (MultiWorkerMirroredStrategy),
#                 batch 64 a worker, against fmnist_mirrored --global-batch 128
#   deepfm_small  bench/compare_keras_tf.sh's DeepFM dim 8, 64-64, batch 512, Adagrad 0.2,
#                 4096 buckets, against ctr_ps with the same settings (2 PS x 2 workers)
#   deepfm_400    DeepFM dim 16, 400-400-400, batch 1024, Adagrad 0.05, 65536 buckets,
#                 against ctr_ps (PRECISION, default float32, on both)
#   CASES (default all four), ROUNDS (3), MLP_STEPS (steps per worker, 2814: 3 epochs),
#   WORK (/tmp/troupe-keras-bench, shared with compare_keras_tf.sh), FMNIST (the IDX dir),
#   LOCK (a flock file each run holds; empty: none).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../build/bin}
kpy=${KERASPY:-$here/../build/keras-venv/bin/python}
rounds=${ROUNDS:-3}
work=${WORK:-/tmp/troupe-keras-bench}
fmnist=${FMNIST:-/usr/share/datasets/fashion-mnist}
cases=${CASES:-"mlp_ps mlp_mirrored deepfm_small deepfm_400"}
mlp_steps=${MLP_STEPS:-2814}
precision=${PRECISION:-float32}
lock=${LOCK-/tmp/troupe-build.lock}
# shellcheck source=bench/lib.sh
source "$here/lib.sh"
mkdir -p "$work"


out=$(mktemp)
trap 'rm -f "$out"' EXIT
emit() {  # case side line
  echo "{\"bench\":\"graph_engine\",\"case\":\"$1\",\"side\":\"$2\",\"precision\":\"$precision\",\"run\":$3}" | tee -a "$out"
}
for c in $cases; do
  case "$c" in
    mlp_ps|mlp_mirrored) model=$(keras_file mlp mlp --lr 0.1) ;;
    deepfm_small)
      model=$(keras_file deepfm_small deepfm --buckets 4096 --dim 8 --hidden 64 64 --lr 0.2)
      data=$work/ctr_small; ctr_data "$data" 50 4096 ;;
    deepfm_400)
      model=$(keras_file deepfm_400 deepfm --buckets 65536 --dim 16 --hidden 400 400 400 --lr 0.05)
      data=$work/ctr_wide; ctr_data "$data" 1000 65536 ;;
    *) echo "unknown case $c" >&2; exit 2 ;;
  esac
  for _ in $(seq "$rounds"); do
    case "$c" in
      mlp_ps)
        emit "$c" graph "$(locked "$bin/troupe" launch --ps 2 --workers 2 -- "$bin/troupe" train \
          --model "$model" --data "$fmnist" --validation "$fmnist" --format idx --batch 64 \
          --steps $((2 * mlp_steps)) --shuffle 10000 --precision "$precision" 2>/dev/null | tail -1)"
        emit "$c" hand "$(locked "$bin/troupe" launch --ps 2 --workers 2 -- "$bin/fmnist_ps" \
          --data-dir "$fmnist" --batch 64 --steps-per-worker "$mlp_steps" --lr 0.1 \
          --precision "$precision" 2>/dev/null | tail -1)" ;;
      mlp_mirrored)
        emit "$c" graph "$(locked "$bin/troupe" launch --workers 2 -- "$bin/troupe" train \
          --model "$model" --data "$fmnist" --validation "$fmnist" --format idx --batch 64 \
          --steps "$mlp_steps" --shuffle 10000 --precision "$precision" 2>/dev/null | tail -1)"
        emit "$c" hand "$(locked "$bin/troupe" launch --workers 2 -- "$bin/fmnist_mirrored" \
          --data-dir "$fmnist" --global-batch 128 --steps "$mlp_steps" --lr 0.1 \
          --precision "$precision" 2>/dev/null | tail -1)" ;;
      deepfm_small|deepfm_400)
        if [ "$c" = deepfm_small ]; then
          b=512 s=1600 args="--dim 8 --hidden 64 --hidden 64 --buckets-per-field 4096 --lr 0.2"
        else
          b=1024 s=300 args="--dim 16 --hidden 400 --hidden 400 --hidden 400 --buckets-per-field 65536 --lr 0.05"
        fi
        emit "$c" graph "$(locked "$bin/troupe" launch --ps 2 --workers 2 -- "$bin/troupe" train \
          --model "$model" --data "$data"/train-*.tfrecord --format tfrecord --batch "$b" \
          --steps $((2 * s)) --precision "$precision" --validation "$data/heldout.tfrecord" \
          2>/dev/null | tail -1)"
        emit "$c" hand "$(locked "$bin/troupe" launch --ps 2 --workers 2 -- "$bin/ctr_ps" \
          --data "$data" --format tfrecord --batch "$b" --steps-per-worker "$s" $args \
          --precision "$precision" 2>/dev/null | tail -1)" ;;
    esac
  done
done
python3 - "$out" "$here" <<'PY'
import json, statistics, sys
sys.path.insert(0, sys.argv[2])
from side_runs import field, read_runs
rows = read_runs(sys.argv[1])


def speed(r):
    if r["side"] == "hand":
        return field(r, "examples_per_sec")
    workers = field(r, "workers") if r["case"] == "mlp_mirrored" else 1  # --batch: a worker's
    return field(r, "steps") * field(r, "batch") * workers / field(r, "epoch_s")


def metric(r):
    if r["case"].startswith("mlp"):
        return field(r, "val_accuracy" if r["side"] == "graph" else "test_accuracy")
    return field(r, "val_auc" if r["side"] == "graph" else "auc")


for case in dict.fromkeys(r["case"] for r in rows):
    med = {}
    for side in ("graph", "hand"):
        rs = [r for r in rows if r["case"] == case and r["side"] == side]
        med[side] = statistics.median(speed(r) for r in rs)
        print(json.dumps({"bench": "graph_engine", "case": case, "side": side,
                          "precision": rs[0]["precision"],
                          "examples_per_sec": [round(speed(r)) for r in rs],
                          "examples_per_sec_median": round(med[side]),
                          "metric": "accuracy" if case.startswith("mlp") else "auc",
                          "metric_runs": [round(metric(r), 4) for r in rs],
                          "metric_median": statistics.median(metric(r) for r in rs)}))
    print(json.dumps({"bench": "graph_engine_ratio", "case": case,
                      "graph_vs_hand": round(med["graph"] / med["hand"], 3)}))
PY
