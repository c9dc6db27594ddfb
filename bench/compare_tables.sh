#!/usr/bin/env bash
# Hashed against dynamic embedding tables on the same raw-id click log (ctr_datagen
# --raw-ids), side by side: ctr_ps (2 PS x 2 workers, DeepFM) with
#   fixed     a hashed table of BUCKETS rows per field (26 x BUCKETS rows),
#   dynamic   a dynamic table with about the same memory: MAX_ROWS rows (default half the
#             hashed rows: a dynamic row costs its key, count, step, index and sketch share
#             on top), admitted at MIN_COUNT occurrences,
#   uncapped  a dynamic table without cap or admission threshold: collision-free,
# each configuration in turn within every round (machine noise hits them alike), ROUNDS
# rounds. One JSON line per configuration with medians (examples/s, AUC, table rows and
# bytes, PS RSS) and the ratio / difference against the hashed table, then a summary line.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../build/bin}
rounds=${ROUNDS:-3}
buckets=${BUCKETS:-4096}
max_rows=${MAX_ROWS:-$((26 * buckets / 2))}
min_count=${MIN_COUNT:-2}
data=${DATA:-/tmp/troupe-ctr-raw}
args=${CTR_ARGS:-"--batch 512 --hidden 64 --hidden 64 --dim 8 --lr 0.2 --cache --steps-per-worker 800"}
if [ ! -f "$data/teacher.json" ]; then
  "$bin/ctr_datagen" --out "$data" --rows "${ROWS:-400000}" --files 4 --raw-ids \
    --vocab "${VOCAB:-100000}" --format criteo >/dev/null
fi
declare -A flags=(
  [fixed]="--table fixed --buckets-per-field $buckets"
  [dynamic]="--table dynamic --max-rows $max_rows --min-count $min_count"
  [uncapped]="--table dynamic --min-count 1")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for round in $(seq "$rounds"); do
  for c in fixed dynamic uncapped; do
    line=$("$bin/troupe" launch --ps 2 --workers 2 -- "$bin/ctr_ps" --data "$data" $args \
      ${flags[$c]} 2>/dev/null | tail -1)
    echo "{\"config\":\"$c\",\"run\":$line}" >>"$out"
  done
done
python3 - "$out" "$here" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
from table_runs import med, summarize


def extra(config, ok, base):
    line = {"auc_median": med(c["auc"] for c in ok), "auc_all": [c["auc"] for c in ok],
            "teacher_auc": ok[-1]["teacher_auc"]}
    if base:
        line["auc_minus_fixed"] = line["auc_median"] - base["auc_median"]
        line["bytes_vs_fixed"] = ok[-1]["table_bytes"] / base["table_bytes"]
    return line


summarize("compare_tables", sys.argv[1], extra)
PY
