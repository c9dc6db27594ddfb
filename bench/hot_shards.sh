#!/usr/bin/env bash
# Hot shards (issue 42): how evenly a table's rows load the PS tasks. ctr_ps under
# `troupe launch --ps PS --workers WORKERS` on two data sets of the same Zipf click log
# (ctr_datagen --zipf ZIPF): ids hashed into buckets (the Criteo reader's) and ids ranked by
# frequency (--ranked-ids, a vocabulary lookup's), each trained with --shard-rows range and
# interleaved, the four alternated within every round, ROUNDS rounds. One JSON line per
# run (the chief's ps_load_balance: the busiest PS task's rows over the mean, and
# examples/s), then one line per data set and layout with medians, and a summary of the
# ratios interleaved / range.
#   PS (4), WORKERS (4), ROWS (64000), VOCAB (1000), BUCKETS (1024), ZIPF (1.1),
#   STEPS (steps per worker, 1500), ROUNDS (3), WORK (/tmp/troupe-hot-shards)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../build/bin}
rounds=${ROUNDS:-3}
ps=${PS:-4}
workers=${WORKERS:-4}
buckets=${BUCKETS:-1024}
work=${WORK:-/tmp/troupe-hot-shards}
mkdir -p "$work"
for ids in hashed ranked; do
  flag=""
  [ "$ids" = ranked ] && flag=--ranked-ids
  [ -f "$work/$ids/teacher.json" ] ||
    "$bin/ctr_datagen" --out "$work/$ids" --rows "${ROWS:-64000}" --files 4 --format tfrecord \
      --vocab "${VOCAB:-1000}" --buckets-per-field "$buckets" --zipf "${ZIPF:-1.1}" $flag >/dev/null
done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for round in $(seq "$rounds"); do
  for ids in hashed ranked; do
    for layout in range interleaved; do
      line=$("$bin/troupe" launch --ps "$ps" --workers "$workers" -- "$bin/ctr_ps" \
        --data "$work/$ids" --format tfrecord --buckets-per-field "$buckets" \
        --steps-per-worker "${STEPS:-1500}" --shard-rows "$layout" 2>/dev/null | tail -1)
      echo "{\"bench\":\"hot_shards\",\"ids\":\"$ids\",\"layout\":\"$layout\",\"round\":$round,\"run\":$line}" |
        tee -a "$out"
    done
  done
done
python3 - "$out" "$here" <<'EOF'
import json, statistics, sys
sys.path.insert(0, sys.argv[2])
from side_runs import field, read_runs
rows = read_runs(sys.argv[1])
med = {}
for ids in ("hashed", "ranked"):
    for layout in ("range", "interleaved"):
        runs = [r for r in rows if r["ids"] == ids and r["layout"] == layout and r["run"].get("ok")]
        line = {"bench": "hot_shards_median", "ids": ids, "layout": layout, "runs": len(runs)}
        if runs:
            line["ps_load_balance"] = statistics.median(field(r, "ps_load_balance") for r in runs)
            line["examples_per_sec"] = statistics.median(field(r, "examples_per_sec") for r in runs)
            line["auc"] = statistics.median(field(r, "auc") for r in runs)
        med[(ids, layout)] = line
        print(json.dumps(line))
summary = {"bench": "hot_shards_summary"}
for ids in ("hashed", "ranked"):
    a, b = med[(ids, "interleaved")], med[(ids, "range")]
    if "examples_per_sec" in a and "examples_per_sec" in b:
        summary[ids + "_examples_per_sec_interleaved_over_range"] = a["examples_per_sec"] / b["examples_per_sec"]
        summary[ids + "_balance_range"] = b["ps_load_balance"]
        summary[ids + "_balance_interleaved"] = a["ps_load_balance"]
print(json.dumps(summary))
EOF
