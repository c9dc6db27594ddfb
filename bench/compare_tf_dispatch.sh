#!/usr/bin/env bash
# Dispatch of trivial closures as workers grow, Troupe against TensorFlow 2.21's
# ClusterCoordinator (issue 42's peer): for each N in SIZES, in every round, bench_ps
# --sections idle,closures under `troupe launch --ps PS --workers N`, then
# bench/tf_dispatch.py with the same N (its tasks real processes, bench/tf_cluster.py).
# TensorFlow's tasks are large: before each TensorFlow run the memory it needs is estimated
# from the largest worker and chief seen so far (x (N + PS + 1), +25%); a size that would
# not fit in MemAvailable is skipped and said so, not run. Prints one JSON line per run,
# then per size one line of medians for each side and their ratios.
#   SIZES "2 16 64", PS 2, ROUNDS 3, CLOSURES 2000, IDLE 5 (s), LIMIT_S 600 (a run's bound)
#   TFPY /opt/tfpeer/bin/python (../shared/peers/README.md)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../build/bin}
tfpy=${TFPY:-/opt/tfpeer/bin/python}
sizes=${SIZES:-"2 16 64"}
ps=${PS:-2}
rounds=${ROUNDS:-3}
closures=${CLOSURES:-2000}
idle=${IDLE:-5}
limit=${LIMIT_S:-600}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
per_task_mb=0  # the largest TensorFlow task seen so far
for round in $(seq "$rounds"); do
  for n in $sizes; do
    line=$(timeout -s KILL "$limit" "$bin/troupe" launch --ps "$ps" --workers "$n" -- \
      "$bin/bench_ps" --sections idle,closures --closures "$closures" --rounds 1 \
      --idle-seconds "$idle" 2>/dev/null | grep '^{"bench"' | tr '\n' ' ') || true
    echo "{\"side\":\"troupe\",\"workers\":$n,\"round\":$round,\"lines\":[${line// \{/,\{}]}" >>"$out"
    avail_mb=$(awk '/MemAvailable/ {print int($2 / 1024)}' /proc/meminfo)
    need_mb=$(( per_task_mb * (n + ps + 1) * 5 / 4 ))
    if (( need_mb > avail_mb )); then
      echo "{\"side\":\"tf\",\"workers\":$n,\"round\":$round,\"skipped\":\"needs about $need_mb MB (${per_task_mb} MB a task), $avail_mb MB available\"}" >>"$out"
      continue
    fi
    line=$(timeout -s KILL "$limit" "$tfpy" "$here/tf_dispatch.py" --ps "$ps" --workers "$n" \
      --closures "$closures" --rounds 1 --idle-seconds "$idle" 2>/dev/null | grep '^{' | tail -1) || true
    [ -n "$line" ] || line="{\"ok\":false,\"error\":\"no result within ${limit} s or the run died\"}"
    echo "{\"side\":\"tf\",\"workers\":$n,\"round\":$round,\"run\":$line}" >>"$out"
    per_task_mb=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]).get("run",{}); print(int(max(r.get("worker_rss_mb_median") or 0, r.get("chief_peak_rss_mb") or 0, float(sys.argv[2]))))' "$(tail -1 "$out")" "$per_task_mb")
  done
done
cat "$out"
python3 - "$out" "$sizes" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for n in [int(x) for x in sys.argv[2].split()]:
    tr = [l for r in rows if r["side"] == "troupe" and r["workers"] == n for l in r["lines"]]
    idle = [l["chief_core_fraction"] for l in tr if l["bench"] == "chief_idle"]
    dis = [l for l in tr if l["bench"] == "closures"]
    tf = [r["run"] for r in rows if r["side"] == "tf" and r["workers"] == n and "run" in r]
    tf_ok = [r for r in tf if r.get("ok")]
    skipped = [r["skipped"] for r in rows if r["side"] == "tf" and r["workers"] == n and "skipped" in r]
    med = lambda xs: statistics.median(xs) if xs else None
    out = {"bench": "tf_dispatch_compare", "workers": n, "troupe_runs": len(dis),
           "tf_runs": len(tf_ok), "tf_failed": [r.get("error") for r in tf if not r.get("ok")],
           "tf_skipped": skipped,
           "troupe_closures_per_sec": med([l["no_result_per_sec_median"] for l in dis]),
           "tf_closures_per_sec": med([r["no_result_per_sec_median"] for r in tf_ok]),
           "troupe_fetched_per_sec": med([l["fetched_per_sec_median"] for l in dis]),
           "tf_fetched_per_sec": med([r["fetched_per_sec_median"] for r in tf_ok]),
           "troupe_chief_cpu_us_per_closure": med([l["chief_cpu_us_per_closure_median"] for l in dis]),
           "tf_chief_cpu_us_per_closure": med([r["chief_cpu_us_per_closure_median"] for r in tf_ok]),
           "troupe_chief_idle_core_fraction": med(idle),
           "tf_chief_idle_core_fraction": med([r["chief_core_fraction"] for r in tf_ok]),
           "tf_worker_rss_mb": med([r["worker_rss_mb_median"] for r in tf_ok if r.get("worker_rss_mb_median")])}
    if out["troupe_closures_per_sec"] and out["tf_closures_per_sec"]:
        out["closures_per_sec_troupe_vs_tf"] = out["troupe_closures_per_sec"] / out["tf_closures_per_sec"]
        out["chief_cpu_per_closure_tf_vs_troupe"] = (
            out["tf_chief_cpu_us_per_closure"] / out["troupe_chief_cpu_us_per_closure"])
    print(json.dumps(out))
PY
