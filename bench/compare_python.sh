#!/usr/bin/env bash
# fit() from Python (`import troupe`, bench/python_fit.py) against `troupe train` on the
# same .keras model, files, batch, shuffle and epochs, in one process each, alternated
# ROUNDS times in one run. Each side's examples/s is every step's examples over fit()'s
# training time (Python's interpreter start and imports outside it). Prints one JSON line per run, then
# per case one line per side (runs and median) and a ratio line (python / troupe train).
#   mlp       .keras MLP 784-128-10, Fashion-MNIST's training IDX files, batch 64 (small
#             steps: a per-step cost shows most), EPOCHS (3)
#   mlp_cb    the same with a Python callback whose on_train_batch_end runs every step
#   deepfm    bench/compare_keras_tf.sh's DeepFM dim 8, 64-64, batch 512, 400000 rows
#   CASES (default "mlp mlp_cb deepfm"), ROUNDS (5), WORK (/tmp/troupe-python-bench),
#   FMNIST (the IDX dir).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../build/bin}
kpy=${KERASPY:-$here/../build/keras-venv/bin/python}
rounds=${ROUNDS:-5}
epochs=${EPOCHS:-3}
work=${WORK:-/tmp/troupe-python-bench}
fmnist=${FMNIST:-/usr/share/datasets/fashion-mnist}
cases=${CASES:-"mlp mlp_cb deepfm"}
export PYTHONPATH=$here/../build/python${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$work"

out=$(mktemp)
trap 'rm -f "$out"' EXIT
emit() {  # case side line
  echo "{\"bench\":\"python_fit\",\"case\":\"$1\",\"side\":\"$2\",\"run\":$3}" | tee -a "$out"
}
for c in $cases; do
  case "$c" in
    mlp|mlp_cb)
      model=$work/mlp.keras
      [ -f "$model" ] || "$kpy" "$here/keras_ctr_models.py" mlp --lr 0.1 --out "$model" >/dev/null 2>&1
      data="$fmnist/train-images-idx3-ubyte.gz $fmnist/train-labels-idx1-ubyte.gz"
      format=idx batch=64 shuffle=10000 ;;
    deepfm)
      model=$work/deepfm.keras
      [ -f "$model" ] || "$kpy" "$here/keras_ctr_models.py" deepfm --buckets 4096 --dim 8 \
        --hidden 64 64 --lr 0.2 --out "$model" >/dev/null 2>&1
      [ -f "$work/ctr/teacher.json" ] || "$bin/ctr_datagen" --out "$work/ctr" --rows 400000 \
        --files 4 --vocab 50 --format tfrecord --buckets-per-field 4096 >/dev/null
      data=$(echo "$work"/ctr/train-*.tfrecord)
      format=tfrecord batch=512 shuffle=0 ;;
    *) echo "unknown case $c" >&2; exit 2 ;;
  esac
  extra=()
  [ "$c" = mlp_cb ] && extra=(--callback)
  for _ in $(seq "$rounds"); do
    # shellcheck disable=SC2086  # the file lists split on purpose
    emit "$c" troupe_train "$("$bin/troupe" train --model "$model" --data $data --format "$format" \
      --batch "$batch" --epochs "$epochs" --shuffle "$shuffle" 2>/dev/null | tail -1)"
    # shellcheck disable=SC2086
    emit "$c" python "$("$kpy" "$here/python_fit.py" --model "$model" --data $data \
      --format "$format" --batch "$batch" --epochs "$epochs" --shuffle "$shuffle" \
      "${extra[@]}" 2>/dev/null | tail -1)"
  done
done
python3 - "$out" "$here" <<'PY'
import json, statistics, sys
sys.path.insert(0, sys.argv[2])
from side_runs import field, read_runs
rows = read_runs(sys.argv[1])
for case in dict.fromkeys(r["case"] for r in rows):
    med = {}
    for side in ("troupe_train", "python"):
        rs = [r for r in rows if r["case"] == case and r["side"] == side]
        # Both sides the same measure: every step's examples over fit()'s training time
        # (troupe train's examples_per_sec; a History's is its last epoch's).
        speeds = [field(r, "examples_per_sec") if side == "troupe_train"
                  else field(r, "steps_run") * field(r, "batch") / field(r, "train_s")
                  for r in rs]
        med[side] = statistics.median(speeds)
        print(json.dumps({"bench": "python_fit", "case": case, "side": side,
                          "examples_per_sec": [round(s) for s in speeds],
                          "examples_per_sec_median": round(med[side]),
                          "loss_runs": [round(field(r, "loss"), 4) for r in rs]}))
    print(json.dumps({"bench": "python_fit_ratio", "case": case,
                      "python_vs_troupe_train": round(med["python"] / med["troupe_train"], 3)}))
PY
