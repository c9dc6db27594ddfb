#!/usr/bin/env bash
# ctr_ps against TensorFlow 2.21's ParameterServerStrategy (bench/tf_ps_ctr.py) on the same
# DeepFM, the same ctr_datagen TFRecord files, batch and cluster shape (2 PS, 2 workers),
# alternated ROUNDS times. Prints one JSON line per side with its median examples/s and AUC,
# then one line of ratios. Needs the TensorFlow venv of ../shared/peers/README.md.
#   DATA=/tmp/ctr  (made with ctr_datagen --format tfrecord --buckets-per-field $BUCKETS if absent)
#   MODEL_ARGS: passed to both (same meaning): batch, steps per worker, dim, hidden, buckets, lr
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
if [ ! -f "$data/teacher.json" ]; then
  "$bin/ctr_datagen" --out "$data" --rows "${ROWS:-400000}" --files 4 --vocab "${VOCAB:-50}" \
    --format tfrecord --buckets-per-field "$buckets" >/dev/null
fi
troupe_hidden=""
for h in $hidden; do troupe_hidden="$troupe_hidden --hidden $h"; done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for _ in $(seq "$rounds"); do
  line=$("$bin/troupe" launch --ps 2 --workers 2 -- "$bin/ctr_ps" --data "$data" --format tfrecord \
    --batch "$batch" --steps-per-worker "$steps" --dim "$dim" $troupe_hidden \
    --buckets-per-field "$buckets" --lr "$lr" 2>/dev/null | tail -1)
  echo "{\"side\":\"troupe\",\"run\":$line}" >>"$out"
  line=$("$py" "$here/tf_ps_ctr.py" --data "$data" --ps 2 --workers 2 --batch "$batch" \
    --steps "$steps" --dim "$dim" --hidden $hidden --buckets-per-field "$buckets" --lr "$lr" \
    2>/dev/null | grep '^{' | tail -1)
  echo "{\"side\":\"tf_ps\",\"run\":$line}" >>"$out"
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def field(r, k):
    run = r["run"]
    return (run["chief"] if "chief" in run else run)[k]
med = {}
for side in ["troupe", "tf_ps"]:
    rs = [r for r in rows if r["side"] == side]
    med[side] = statistics.median(field(r, "examples_per_sec") for r in rs)
    print(json.dumps({"bench": "ctr_ps_vs_tf_ps", "side": side,
                      "examples_per_sec": [round(field(r, "examples_per_sec")) for r in rs],
                      "examples_per_sec_median": med[side],
                      "auc": [round(field(r, "auc"), 4) for r in rs],
                      "auc_median": statistics.median(field(r, "auc") for r in rs),
                      "teacher_auc": field(rs[0], "teacher_auc")}))
print(json.dumps({"bench": "ctr_ps_vs_tf_ps_ratio", "troupe_vs_tf": med["troupe"] / med["tf_ps"]}))
PY
