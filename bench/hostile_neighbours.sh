#!/usr/bin/env bash
# Strangers on loopback against running jobs: bench/stranger_flood.py holds PER_PORT
# (default 1000) idle, dripping and garbage connections at every port of every task
# (opening again each one a task closes) from the moment the tasks listen until they end.
# Two jobs, each without and with the flood in the same round, ROUNDS rounds:
#   fmnist_ps: troupe launch --ps 2 --workers 2 (STEPS per worker, default 12000);
#   elastic fmnist_mirrored: 3 workers, worker:2 killed at 5 s and restarted, so the ring
#     re-forms twice under the flood (MIRRORED_STEPS, default 8000).
# Calm runs are sampled by the same script with no stranger. One JSON line per run, then
# a summary: every run ok, accuracy with and without the flood, examples/s ratio, each
# task's most threads and resident memory with and without.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../build/bin}
rounds=${ROUNDS:-3}
per_port=${PER_PORT:-1000}
steps=${STEPS:-12000}
mirrored_steps=${MIRRORED_STEPS:-8000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$work/runs.jsonl
for round in $(seq "$rounds"); do
  for job in ps mirrored; do
    for side in calm flood; do
      run=$work/$round-$job-$side
      if [ "$job" = ps ]; then
        cmd=("$bin/troupe" launch --ps 2 --workers 2 --run-dir "$run" --
          "$bin/fmnist_ps" --steps-per-worker "$steps" --seed "$round")
      else
        cmd=("$bin/troupe" launch --workers 3 --restart-failed --chaos kill:worker:2@5s
          --run-dir "$run" -- "$bin/fmnist_mirrored" --elastic --steps "$mirrored_steps"
          --checkpoint-every-steps 500 --model-dir "$run-model")
      fi
      "${cmd[@]}" > "$run.out" 2> /dev/null &
      launch=$!
      # Calm runs are sampled the same way, with no stranger.
      n=0
      [ "$side" = flood ] && n=$per_port
      flood=$(python3 "$here/stranger_flood.py" --run-dir "$run" --per-port "$n" \
        --max-seconds 600 | tail -1)
      wait "$launch" || true
      line=$(tail -1 "$run.out")
      echo "{\"bench\":\"hostile_neighbours\",\"round\":$round,\"job\":\"$job\",\"side\":\"$side\",\"run\":$line,\"flood\":$flood}" | tee -a "$out"
    done
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = statistics.median
out = {"bench": "hostile_neighbours_summary", "rounds": max(r["round"] for r in rows)}
for job in ("ps", "mirrored"):
    s = {}
    for side in ("calm", "flood"):
        runs = [r for r in rows if r["job"] == job and r["side"] == side]
        chiefs = [r["run"].get("chief", {}) for r in runs]
        ok = [c for c in chiefs if c.get("ok")]
        s[side] = {"runs": len(runs), "ok_runs": len(ok),
                   "test_accuracy_all": [c.get("test_accuracy") for c in ok],
                   "examples_per_sec_all": [round(c.get("examples_per_sec", 0)) for c in ok],
                   "restarts_all": [r["run"].get("restarts") for r in runs]}
        if job == "mirrored":
            s[side]["workers_lost_all"] = [c.get("workers_lost") for c in ok]
            s[side]["workers_joined_all"] = [c.get("workers_joined") for c in ok]
        floods = [r["flood"] for r in runs if r["flood"]]
        s[side]["connections_opened_all"] = [f["connections_opened"] for f in floods]
        if side == "flood":
            s[side]["ports_by_kind"] = floods[0]["ports_by_kind"] if floods else None
        if True:
            tasks = {}
            for f in floods:
                for name, t in f["tasks"].items():
                    m = tasks.setdefault(name, {"threads_max": 0, "rss_mb_max": 0})
                    m["threads_max"] = max(m["threads_max"], t["threads_max"])
                    m["rss_mb_max"] = max(m["rss_mb_max"], t["rss_mb_max"])
            s[side]["tasks_worst"] = tasks
    if s["calm"]["ok_runs"] and s["flood"]["ok_runs"]:
        s["accuracy_flood_minus_calm"] = round(med(s["flood"]["test_accuracy_all"]) -
                                               med(s["calm"]["test_accuracy_all"]), 4)
        s["examples_per_sec_flood_over_calm"] = round(
            med(s["flood"]["examples_per_sec_all"]) / med(s["calm"]["examples_per_sec_all"]), 3)
    out[job] = s
print(json.dumps(out))
PY
