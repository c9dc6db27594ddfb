#!/usr/bin/env bash
# What replicated shards cost and what a lost PS costs with them: fmnist_ps and ctr_ps
# (2 PS x 2 workers) with --ps-replicas 1 and 2, each configuration in turn within every
# round (so machine noise hits them alike), ROUNDS rounds; and, per round, fmnist_ps with
# --ps-replicas 2 while ps:1 is killed for good at KILL_AT (no restart, no snapshots).
# One JSON line per configuration with medians (examples/s, test accuracy or AUC, the
# longest stall) and the examples/s ratio against one copy, then a summary line.
#   JOBS: "fmnist ctr" (default both); CTR_ARGS: ctr_ps's model and data flags
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../build/bin}
rounds=${ROUNDS:-3}
jobs=${JOBS:-"fmnist ctr"}
kill_at=${KILL_AT:-2s}
data=${DATA:-/tmp/troupe-ctr-replicas}
ctr_args=${CTR_ARGS:-"--format tfrecord --batch 512 --dim 8 --hidden 64 --hidden 64 \
--buckets-per-field 4096 --lr 0.05 --optimizer adam --steps-per-worker 600 --cache"}
if [[ " $jobs " == *" ctr "* ]] && [ ! -f "$data/teacher.json" ]; then
  "$bin/ctr_datagen" --out "$data" --rows "${ROWS:-400000}" --files 4 --vocab 50 \
    --format tfrecord --buckets-per-field 4096 >/dev/null
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for round in $(seq "$rounds"); do
  for job in $jobs; do
    for config in 1 2 2+kill; do
      replicas=${config%%+*}
      chaos=()
      [ "$config" = 2+kill ] && chaos=(--chaos "kill:ps:1@$kill_at")
      [ "$config" = 2+kill ] && [ "$job" != fmnist ] && continue
      if [ "$job" = ctr ]; then
        line=$("$bin/troupe" launch --ps 2 --workers 2 "${chaos[@]}" -- "$bin/ctr_ps" \
          --data "$data" $ctr_args --ps-replicas "$replicas" 2>/dev/null | tail -1 || true)
      else
        steps=2000
        [ "$config" = 2+kill ] && steps=6000
        line=$("$bin/troupe" launch --ps 2 --workers 2 "${chaos[@]}" -- "$bin/fmnist_ps" \
          --steps-per-worker "$steps" --ps-replicas "$replicas" 2>/dev/null | tail -1 || true)
      fi
      echo "{\"job\":\"$job\",\"config\":\"$config\",\"run\":$line}" >>"$out"
    done
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = statistics.median
summary = {"bench": "compare_replicas", "rounds": 0, "results": []}
for job in dict.fromkeys(r["job"] for r in rows):
    base = None
    for config in dict.fromkeys(r["config"] for r in rows if r["job"] == job):
        runs = [r["run"].get("chief", {}) for r in rows if r["job"] == job and r["config"] == config]
        ok = [c for c in runs if c.get("ok")]
        quality = "auc" if job == "ctr" else "test_accuracy"
        line = {"bench": "compare_replicas", "job": job, "config": config, "runs": len(runs),
                "ok_runs": len(ok)}
        if ok:
            line["examples_per_sec_median"] = med(c["examples_per_sec"] for c in ok)
            line["examples_per_sec_all"] = [round(c["examples_per_sec"]) for c in ok]
            line[quality + "_median"] = med(c[quality] for c in ok)
            line["longest_stall_ms_median"] = med(c.get("longest_stall_ms", 0) for c in ok)
            line["longest_stall_ms_all"] = [c.get("longest_stall_ms") for c in ok]
            for k in ("ps_failovers", "updates_lost", "closures_retried"):
                line[k + "_all"] = [c.get(k) for c in ok]
            line["completed_all_scheduled"] = all(
                c.get("closures_completed", c.get("steps")) == c.get("closures_scheduled",
                                                                     c.get("steps")) for c in ok)
            if config == "1":
                base = line
            if base and config != "1":
                line["examples_per_sec_vs_1"] = (line["examples_per_sec_median"] /
                                                 base["examples_per_sec_median"])
        summary["rounds"] = max(summary["rounds"], len(runs))
        summary["results"].append(line)
        print(json.dumps(line))
print(json.dumps(summary))
PY
