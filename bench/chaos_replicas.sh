#!/usr/bin/env bash
# A PS killed every KILL_EVERY seconds through training, each time the other one, with
# two copies of every shard: fmnist_ps, 2 PS x 3 workers, --ps-replicas 2, troupe launch
# --restart-failed (each killed task comes back and rejoins as a replica before the next
# kill). Against a run without failures in the same round, ROUNDS rounds. One JSON line
# per run, then a summary: kills, ps_failovers, replicas_rebuilt, updates_lost, closures
# completed of scheduled, test accuracy against the failure-free run, longest stall.
#   STEPS: steps per worker (default 12000); KILLS: kills per run (default 5)
#   FAULT=cut: instead of a kill, the PS task's whole link goes down for CUT_FOR seconds
#   (default 2), the process living on, with one network namespace per task
#   (tests/multihost/netns_cluster.sh, as root): when the link heals the same process
#   answers its address again and rejoins. KILLS and KILL_EVERY then count the cuts.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../build/bin}
rounds=${ROUNDS:-3}
steps=${STEPS:-12000}
kills=${KILLS:-5}
every=${KILL_EVERY:-5}
fault=${FAULT:-kill}
cut_for=${CUT_FOR:-2}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for round in $(seq "$rounds"); do
  for side in calm chaos; do
    chaos=()
    if [ "$side" = chaos ]; then
      for k in $(seq "$kills"); do
        if [ "$fault" = cut ]; then
          chaos+=(--cut "ps-$((k % 2))" "$((k * every))" "$cut_for")
        else
          chaos+=(--chaos "kill:ps:$((k % 2))@$((k * every))s")
        fi
      done
    fi
    if [ "$fault" = cut ]; then
      line=$("$here/../tests/multihost/netns_cluster.sh" "$bin" fmnist_ps 2 3 "${chaos[@]}" -- \
        --steps-per-worker "$steps" --ps-replicas 2 --seed "$round" 2>/dev/null | tail -1 || true)
    else
      line=$("$bin/troupe" launch --ps 2 --workers 3 --restart-failed "${chaos[@]}" -- \
        "$bin/fmnist_ps" --steps-per-worker "$steps" --ps-replicas 2 --seed "$round" \
        2>/dev/null | tail -1 || true)
    fi
    echo "{\"bench\":\"chaos_replicas\",\"fault\":\"$fault\",\"round\":$round,\"side\":\"$side\",\"run\":$line}" | tee -a "$out"
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = statistics.median
out = {"bench": "chaos_replicas_summary", "fault": rows[0]["fault"], "rounds": len(rows) // 2}
for side in ("calm", "chaos"):
    runs = [r["run"] for r in rows if r["side"] == side]
    chiefs = [r.get("chief", {}) for r in runs]
    ok = [c for c in chiefs if c.get("ok")]
    s = {"runs": len(runs), "ok_runs": len(ok)}
    if ok:
        s["test_accuracy_median"] = med(c["test_accuracy"] for c in ok)
        s["test_accuracy_all"] = [c["test_accuracy"] for c in ok]
        s["examples_per_sec_median"] = med(c["examples_per_sec"] for c in ok)
        s["longest_stall_ms_all"] = [c["longest_stall_ms"] for c in ok]
        s["train_s_all"] = [round(c["train_s"], 1) for c in ok]
        for k in ("ps_failovers", "replicas_rebuilt", "updates_lost", "ps_restores",
                  "closures_retried", "under_replicated_shards"):
            s[k + "_all"] = [c.get(k) for c in ok]
        s["every_closure_completed"] = all(
            c["closures_completed"] == c["closures_scheduled"] for c in ok)
    s["injections_all"] = [r.get("injections", len(r.get("cuts") or [])) for r in runs]
    s["restarts_all"] = [r.get("restarts") for r in runs]
    out[side] = s
if out.get("calm", {}).get("ok_runs") and out.get("chaos", {}).get("ok_runs"):
    out["accuracy_chaos_minus_calm"] = (out["chaos"]["test_accuracy_median"] -
                                        out["calm"]["test_accuracy_median"])
print(json.dumps(out))
PY
