#!/usr/bin/env bash
# The same .keras models trained by `troupe train` and by Keras on TensorFlow 2.21's
# ParameterServerStrategy (bench/tf_keras_ps.py), 2 PS x 2 workers on 127.0.0.1, the same
# TFRecord files, batch, optimizer, rate and steps, alternated ROUNDS times per model. Each run
# is followed by scoring its held-out file with the same code (tf_keras_ps.py --score on
# Troupe's --out file; the TensorFlow side scores its own model): AUC from ranks.
# Prints one JSON line per run, then per model one line per side (runs, medians) and one
# line of ratios (Troupe's median examples/s over each TensorFlow API's, and over the faster).
#   MODELS   "deepfm_small deepfm_400 wide_deep" (defaults below; each makes its data and
#            .keras file under WORK if absent)
#   APIS     "tf_keras keras3": tf_keras_ps.py's --api values to run (see its header)
#   ROUNDS   3;  PRECISION_deepfm_400 (default mixed_bfloat16), else float32
#   WORK     /tmp/troupe-keras-bench;  LOCK: a flock file each run holds (empty: none)
# Troupe's examples/s is steps * batch / epoch_s (the epoch's training, without the
# validation that follows it, as TensorFlow's window has no scoring). A Troupe run that
# fails (mixed_bfloat16 on a CPU without AVX512_BF16 is refused) is shown, not counted.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../build/bin}
tfpy=${TFPY:-/opt/tfpeer/bin/python}
kpy=${KERASPY:-$here/../build/keras-venv/bin/python}
rounds=${ROUNDS:-3}
work=${WORK:-/tmp/troupe-keras-bench}
models=${MODELS:-"deepfm_small deepfm_400 wide_deep"}
apis=${APIS:-"tf_keras keras3"}
lock=${LOCK-/tmp/troupe-build.lock}
# shellcheck source=bench/lib.sh
source "$here/lib.sh"
mkdir -p "$work"

# Per model: its data directory, how to make it, the .keras file's arguments, batch, steps
# (in all, Keras's steps_per_epoch) and precision.
setup() {
  case "$1" in
    deepfm_small)
      data=$work/ctr_small batch=512 steps=3200 precision=${PRECISION_deepfm_small:-float32}
      margs="deepfm --buckets 4096 --dim 8 --hidden 64 64 --lr 0.2"
      [ -f "$data/teacher.json" ] || locked "$bin/ctr_datagen" --out "$data" --rows 400000 \
        --files 4 --vocab 50 --format tfrecord --buckets-per-field 4096 >/dev/null ;;
    deepfm_400)
      data=$work/ctr_wide batch=1024 steps=600 precision=${PRECISION_deepfm_400:-mixed_bfloat16}
      margs="deepfm --buckets 65536 --dim 16 --hidden 400 400 400 --lr 0.05"
      [ -f "$data/teacher.json" ] || locked "$bin/ctr_datagen" --out "$data" --rows 400000 \
        --files 4 --vocab 1000 --format tfrecord --buckets-per-field 65536 >/dev/null ;;
    wide_deep)
      data=$work/wide_deep batch=512 steps=3200 precision=${PRECISION_wide_deep:-float32}
      margs="wide_deep --buckets 4096 --dim 16 --hidden 256 128 --items 100000 --history 20 --lr 0.1"
      [ -f "$data/teacher.json" ] || locked "$tfpy" "$here/wide_deep_data.py" --out "$data" \
        --rows 400000 --buckets 4096 --items 100000 --history 20 >/dev/null 2>&1 ;;
    *) echo "unknown model $1" >&2; exit 2 ;;
  esac
  model=$work/$1.keras
  [ -f "$model" ] || "$kpy" "$here/keras_ctr_models.py" $margs --out "$model" >/dev/null 2>&1
}

out=$(mktemp)
trained=$(mktemp -d)
trap 'rm -rf "$out" "$trained"' EXIT
for name in $models; do
  setup "$name"
  for r in $(seq "$rounds"); do
    line=$(locked "$bin/troupe" launch --ps 2 --workers 2 -- "$bin/troupe" train \
      --model "$model" --data "$data"/train-*.tfrecord --format tfrecord --batch "$batch" \
      --steps "$steps" --precision "$precision" --validation "$data/heldout.tfrecord" \
      --out "$trained/t.keras" 2>/dev/null | tail -1) || true
    scored=
    if [[ "$line" == *'"ok":true'* ]]; then
      scored=$(locked "$tfpy" "$here/tf_keras_ps.py" --score "$trained/t.keras" \
        --validation "$data/heldout.tfrecord" 2>/dev/null | grep '^{' | tail -1) || true
      # Trained but not scored (the scorer printed nothing): shown as failed, not counted.
      [ -n "$scored" ] || line="{\"unscored\":$line}"
    fi
    if [ -n "$scored" ]; then
      echo "{\"bench\":\"keras_vs_tf\",\"model\":\"$name\",\"side\":\"troupe\",\"precision\":\"$precision\",\"round\":$r,\"run\":$line,\"scored\":$scored}" | tee -a "$out"
    else  # refused (mixed_bfloat16 on a CPU without AVX512_BF16) or failed: shown, not counted
      echo "{\"bench\":\"keras_vs_tf\",\"model\":\"$name\",\"side\":\"troupe\",\"precision\":\"$precision\",\"round\":$r,\"failed\":${line:-null}}"
    fi
    for api in $apis; do
      line=$(locked "$tfpy" "$here/tf_keras_ps.py" --api "$api" --model "$model" \
        --data "$data"/train-*.tfrecord --validation "$data/heldout.tfrecord" --ps 2 --workers 2 \
        --batch "$batch" --steps "$steps" --precision "$precision" 2>/dev/null | grep '^{' | tail -1) || true
      if [ -n "$line" ]; then
        echo "{\"bench\":\"keras_vs_tf\",\"model\":\"$name\",\"side\":\"$api\",\"precision\":\"$precision\",\"round\":$r,\"run\":$line}" | tee -a "$out"
      else  # the peer printed no result: shown, not counted, and the rounds go on
        echo "{\"bench\":\"keras_vs_tf\",\"model\":\"$name\",\"side\":\"$api\",\"precision\":\"$precision\",\"round\":$r,\"failed\":null}"
      fi
    done
  done
done
python3 - "$out" "$here" <<'PY'
import json, statistics, sys
sys.path.insert(0, sys.argv[2])
from side_runs import field, read_runs
rows = read_runs(sys.argv[1])


def speed(r):
    if r["side"] != "troupe":
        return field(r, "examples_per_sec")
    return field(r, "steps") * field(r, "batch") / field(r, "epoch_s")


def auc(r):
    return (r["scored"] if r["side"] == "troupe" else r["run"])["auc_exact"]


for model in dict.fromkeys(r["model"] for r in rows):
    med = {}
    for side in dict.fromkeys(r["side"] for r in rows if r["model"] == model):
        rs = [r for r in rows if r["model"] == model and r["side"] == side]
        med[side] = statistics.median(speed(r) for r in rs)
        line = {"bench": "keras_vs_tf", "model": model, "side": side,
                "precision": rs[0]["precision"],
                "examples_per_sec": [round(speed(r)) for r in rs],
                "examples_per_sec_median": round(med[side]),
                "auc": [round(auc(r), 4) for r in rs],
                "auc_median": statistics.median(auc(r) for r in rs)}
        if side == "troupe":
            line["val_auc"] = [round(field(r, "val_auc"), 4) for r in rs]
            line["examples_per_sec_with_validation"] = [round(field(r, "examples_per_sec"))
                                                        for r in rs]
        print(json.dumps(line))
    tf_sides = [s for s in med if s != "troupe"]
    ratio = {"bench": "keras_vs_tf_ratio", "model": model}
    if "troupe" not in med:  # every Troupe run failed: no ratio
        tf_sides = []
        ratio["troupe"] = "no run finished"
    for s in tf_sides:
        ratio["troupe_vs_" + s] = round(med["troupe"] / med[s], 2)
    if tf_sides:
        best = max(tf_sides, key=lambda s: med[s])
        ratio["tf_best"] = best
        ratio["troupe_vs_tf_best"] = round(med["troupe"] / med[best], 2)
    print(json.dumps(ratio))
PY
