#!/usr/bin/env bash
# ctr_ps against TensorFlow 2.21's ParameterServerStrategy (bench/tf_ps_ctr.py) on the same
# DeepFM, the same ctr_datagen TFRecord files, batch and cluster shape (2 PS, 2 workers),
# alternated ROUNDS times. Prints one JSON line per side with its median examples/s and AUC,
# then one line of ratios. Needs the TensorFlow venv of ../shared/peers/README.md.
#   DATA=/tmp/ctr  (made with ctr_datagen --format tfrecord --buckets-per-field $BUCKETS if absent)
#   MODEL_ARGS: passed to both (same meaning): batch, steps per worker, dim, hidden, buckets, lr
#   PRECISIONS: "float32 mixed_bfloat16" runs each side in each policy (TensorFlow's: bf16
#   casts around its Dense matmuls, Keras' mixed_bfloat16); the ratio line compares each
#   side's fastest policy whose AUC is within 0.002 of its own float32 median.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../build/bin}
py=${TFPY:-/opt/tfpeer/bin/python}
rounds=${ROUNDS:-3}
data=${DATA:-/tmp/troupe-ctr-bench}
batch=${BATCH:-512}
steps=${STEPS:-1600}
dim=${DIM:-8}
hidden=${HIDDEN:-"64 64"}
buckets=${BUCKETS:-4096}
lr=${LR:-0.2}
precisions=${PRECISIONS:-float32}
if [ ! -f "$data/teacher.json" ]; then
  "$bin/ctr_datagen" --out "$data" --rows "${ROWS:-400000}" --files 4 --vocab "${VOCAB:-50}" \
    --format tfrecord --buckets-per-field "$buckets" >/dev/null
fi
troupe_hidden=""
for h in $hidden; do troupe_hidden="$troupe_hidden --hidden $h"; done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for _ in $(seq "$rounds"); do
  for p in $precisions; do
    line=$("$bin/troupe" launch --ps 2 --workers 2 -- "$bin/ctr_ps" --data "$data" --format tfrecord \
      --batch "$batch" --steps-per-worker "$steps" --dim "$dim" $troupe_hidden \
      --buckets-per-field "$buckets" --lr "$lr" --precision "$p" 2>/dev/null | tail -1)
    echo "{\"side\":\"troupe\",\"precision\":\"$p\",\"run\":$line}" >>"$out"
    line=$("$py" "$here/tf_ps_ctr.py" --data "$data" --ps 2 --workers 2 --batch "$batch" \
      --steps "$steps" --dim "$dim" --hidden $hidden --buckets-per-field "$buckets" --lr "$lr" \
      --precision "$p" 2>/dev/null | grep '^{' | tail -1)
    echo "{\"side\":\"tf_ps\",\"precision\":\"$p\",\"run\":$line}" >>"$out"
  done
done
python3 - "$out" "$here" <<'PY'
import json, statistics, sys
sys.path.insert(0, sys.argv[2])
from side_runs import field, read_runs
rows = read_runs(sys.argv[1])
best = {}
for side in ["troupe", "tf_ps"]:
    f32_auc = None
    for p in dict.fromkeys(r.get("precision", "float32") for r in rows):
        rs = [r for r in rows if r["side"] == side and r.get("precision", "float32") == p]
        speed = statistics.median(field(r, "examples_per_sec") for r in rs)
        auc = statistics.median(field(r, "auc") for r in rs)
        if p == "float32":
            f32_auc = auc
        print(json.dumps({"bench": "ctr_ps_vs_tf_ps", "side": side, "precision": p,
                          "examples_per_sec": [round(field(r, "examples_per_sec")) for r in rs],
                          "examples_per_sec_median": speed,
                          "auc": [round(field(r, "auc"), 4) for r in rs], "auc_median": auc,
                          "teacher_auc": field(rs[0], "teacher_auc")}))
        # A policy counts when its AUC is within 0.002 of the side's own float32 run.
        if (f32_auc is None or abs(auc - f32_auc) <= 0.002) and speed > best.get(side, (0, ""))[0]:
            best[side] = (speed, p)
print(json.dumps({"bench": "ctr_ps_vs_tf_ps_ratio", "troupe_best": best["troupe"][1],
                  "tf_best": best["tf_ps"][1],
                  "troupe_vs_tf": best["troupe"][0] / best["tf_ps"][0]}))
PY
