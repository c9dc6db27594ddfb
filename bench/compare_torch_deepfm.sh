#!/usr/bin/env bash
# ctr_ps (1 PS + 1 worker under troupe launch) against PyTorch's DeepFM in one process
# (bench/torch_deepfm.py) on the same ctr_datagen Criteo text files, the same model, batch,
# rate and number of steps, float32 and bf16 (Troupe's mixed_bfloat16, PyTorch's CPU
# autocast), at 1 and 2 threads (torch.set_num_threads; the worker's --intra-op-threads),
# alternated ROUNDS times. One JSON line per configuration with its runs and medians, then
# one line of Troupe/PyTorch ratios.
#   TORCHPY: a python with torch (a venv with PyPI's wheel, or Debian's /usr/bin/python3)
#   DATA, ROWS, BATCH, STEPS, DIM, HIDDEN, BUCKETS, LR, THREADS, ROUNDS: as named
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../build/bin}
py=${TORCHPY:-/usr/bin/python3}
rounds=${ROUNDS:-3}
data=${DATA:-/tmp/troupe-ctr-torch}
batch=${BATCH:-1024}
steps=${STEPS:-300}
dim=${DIM:-16}
hidden=${HIDDEN:-"400 400 400"}
buckets=${BUCKETS:-4096}
lr=${LR:-0.05}
threads=${THREADS:-"1 2"}
if [ ! -f "$data/teacher.json" ]; then
  "$bin/ctr_datagen" --out "$data" --rows "${ROWS:-400000}" --files 4 --vocab "${VOCAB:-50}" \
    --format criteo >/dev/null
fi
troupe_hidden=""
for h in $hidden; do troupe_hidden="$troupe_hidden --hidden $h"; done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for _ in $(seq "$rounds"); do
  for t in $threads; do
    for p in float32 bf16; do
      tp=$([ "$p" = bf16 ] && echo mixed_bfloat16 || echo float32)
      line=$("$bin/troupe" launch --ps 1 --workers 1 -- "$bin/ctr_ps" --data "$data" \
        --batch "$batch" --steps-per-worker "$steps" --dim "$dim" $troupe_hidden \
        --buckets-per-field "$buckets" --lr "$lr" --precision "$tp" --intra-op-threads "$t" \
        2>/dev/null | tail -1)
      echo "{\"side\":\"troupe\",\"precision\":\"$p\",\"threads\":$t,\"run\":$line}" >>"$out"
      line=$("$py" "$here/torch_deepfm.py" --data "$data" --batch "$batch" --steps "$steps" \
        --dim "$dim" --hidden $hidden --buckets-per-field "$buckets" --lr "$lr" \
        --precision "$p" --threads "$t" 2>/dev/null | grep '^{' | tail -1)
      echo "{\"side\":\"torch\",\"precision\":\"$p\",\"threads\":$t,\"run\":$line}" >>"$out"
    done
  done
done
python3 - "$out" "$here" <<'PY'
import json, statistics, sys
sys.path.insert(0, sys.argv[2])
from side_runs import field, read_runs
rows = read_runs(sys.argv[1])
med = {}
for key in dict.fromkeys((r["side"], r["precision"], r["threads"]) for r in rows):
    rs = [r for r in rows if (r["side"], r["precision"], r["threads"]) == key]
    speed = [round(field(r, "examples_per_sec")) for r in rs]
    auc = [round(field(r, "auc"), 5) for r in rs]
    med[key] = (statistics.median(speed), statistics.median(auc))
    print(json.dumps({"bench": "ctr_ps_vs_torch_deepfm", "side": key[0], "precision": key[1],
                      "threads": key[2], "examples_per_sec": speed, "auc": auc,
                      "median_examples_per_sec": med[key][0], "median_auc": med[key][1]}))
ratios = {}
for (side, p, t), (speed, _) in med.items():
    if side == "troupe" and ("torch", p, t) in med:
        ratios[f"{p}_{t}t"] = round(speed / med[("torch", p, t)][0], 3)
best = {s: max(v[0] for k, v in med.items() if k[0] == s) for s in ("troupe", "torch")}
print(json.dumps({"bench": "ctr_ps_vs_torch_deepfm", "troupe_over_torch": ratios,
                  "best_over_best": round(best["troupe"] / best["torch"], 3)}))
PY
