#!/usr/bin/env bash
# How soon the chief sees each killed worker: `troupe launch --ps PS --workers WORKERS` of
# ctr_ps (issue 42's tiny model) with every KILL_EVERY-th worker SIGKILLed at once at
# KILL_AT, ROUNDS times. Each kill's time is the launcher's chaos log (`unix_ms`), each
# loss's the chief's (`worker_losses`, when the coordinator took the worker's closures
# back); both are the host's clock. Prints one JSON line per round (detection ms per
# killed worker: median, max; steps (closures completed), retried; workers lost) and a summary.
#   DATA      ctr_datagen TFRecord files (made if absent: 64,000 rows, 16 files, vocab 50)
#   WORKERS 256, PS 2, KILL_EVERY 10, KILL_AT 8s, STEPS 64 (per worker), ROUNDS 2
#   LIMIT_S   900: a round's bound; its whole process group is ended past it
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../build/bin}
data=${DATA:-/tmp/troupe-kill-detection}
workers=${WORKERS:-256}
ps=${PS:-2}
every=${KILL_EVERY:-10}
at=${KILL_AT:-8s}
steps=${STEPS:-64}
rounds=${ROUNDS:-2}
limit=${LIMIT_S:-900}
if [ ! -f "$data/teacher.json" ]; then
  "$bin/ctr_datagen" --out "$data" --rows 64000 --files 16 --vocab 50 --buckets-per-field 1024 \
    --format tfrecord >/dev/null
fi
chaos=()
for ((i = 0; i < workers; i += every)); do chaos+=(--chaos "kill:worker:$i@$at"); done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$rounds"); do
  line=$(timeout -s KILL "$limit" "$bin/troupe" launch --ps "$ps" --workers "$workers" "${chaos[@]}" \
    -- "$bin/ctr_ps" --data "$data" --format tfrecord --batch 64 --dim 4 --hidden 8 \
    --buckets-per-field 1024 --steps-per-worker "$steps" --cache 2>/dev/null | tail -1) || true
  [ -n "$line" ] || line='{"ok":false,"error":"no JSON line (killed past LIMIT_S?)"}'
  echo "$line" >>"$out"
done
python3 - "$out" "$workers" "$every" <<'PY'
import json, statistics, sys
path, workers, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
all_ms = []
for n, text in enumerate(open(path), 1):
    run = json.loads(text)
    chief = run.get("chief") or {}
    kills = {e["task"]: e["unix_ms"] for e in run.get("chaos", []) if e.get("action") == "kill"}
    seen = {}
    for loss in chief.get("worker_losses", []):
        task = "worker:%d" % loss["worker"]
        if task in kills and loss["unix_ms"] >= kills[task] and task not in seen:
            seen[task] = loss["unix_ms"] - kills[task]
    ms = sorted(seen.values())
    all_ms += ms
    print(json.dumps({
        "bench": "kill_detection", "round": n, "ok": run.get("ok"), "workers": workers,
        "killed": len(kills), "detected": len(ms),
        "detection_ms_median": statistics.median(ms) if ms else None,
        "detection_ms_max": max(ms) if ms else None,
        "steps": chief.get("steps"), "closures_retried": chief.get("closures_retried"),
        "workers_lost": chief.get("workers_lost"), "longest_stall_ms": chief.get("longest_stall_ms"),
        "error": run.get("error") or chief.get("error")}))
print(json.dumps({"bench": "kill_detection_summary", "workers": workers, "kill_every": every,
                  "detections": len(all_ms),
                  "detection_ms_median": statistics.median(all_ms) if all_ms else None,
                  "detection_ms_max": max(all_ms) if all_ms else None}))
PY
