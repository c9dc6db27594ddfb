#!/usr/bin/env bash
# The chief as workers grow (issue 42): bench_ps's idle and dispatch figures under
# `troupe launch --ps PS --workers N` for each N in SIZES, each size in turn within every
# round (so machine noise hits them alike), ROUNDS rounds. One JSON line per size with
# medians: the chief's share of a core with every worker connected and idle, closures/s
# scheduled to joined for trivial steps, and the chief's CPU-microseconds per closure;
# then a summary line with the ratios against the smallest size.
#   SIZES (default "2 16 64 128 256"), PS (2), CLOSURES (5000), IDLE (5 s)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../build/bin}
rounds=${ROUNDS:-3}
sizes=${SIZES:-"2 16 64 128 256"}
ps=${PS:-2}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for round in $(seq "$rounds"); do
  for n in $sizes; do
    "$bin/troupe" launch --ps "$ps" --workers "$n" -- "$bin/bench_ps" --sections idle,closures \
      --closures "${CLOSURES:-5000}" --rounds 1 --idle-seconds "${IDLE:-5}" 2>/dev/null |
      grep '^{"bench"' >>"$out" || echo "{\"bench\":\"failed\",\"workers\":$n}" >>"$out"
  done
done
python3 - "$out" "$sizes" <<'EOF'
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
sizes = [int(n) for n in sys.argv[2].split()]
rows = {}
for n in sizes:
    idle = [l["chief_core_fraction"] for l in lines if l["bench"] == "chief_idle" and l["workers"] == n]
    dis = [l for l in lines if l["bench"] == "closures" and l["workers"] == n]
    failed = sum(1 for l in lines if l["bench"] == "failed" and l["workers"] == n)
    row = {"bench": "scale_workers", "workers": n, "runs": len(dis), "failed_runs": failed}
    if idle:
        row["chief_idle_core_fraction_median"] = statistics.median(idle)
    if dis:
        row["closures_per_sec_median"] = statistics.median(l["no_result_per_sec_median"] for l in dis)
        row["chief_cpu_us_per_closure_median"] = statistics.median(
            l["chief_cpu_us_per_closure_median"] for l in dis)
    rows[n] = row
    print(json.dumps(row))
base, top = rows[sizes[0]], rows[sizes[-1]]
summary = {"bench": "scale_workers_summary", "ok": all(r["failed_runs"] == 0 for r in rows.values())}
if "closures_per_sec_median" in base and "closures_per_sec_median" in top:
    summary["closures_per_sec_largest_vs_smallest"] = (
        top["closures_per_sec_median"] / base["closures_per_sec_median"])
    summary["chief_cpu_per_closure_largest_vs_smallest"] = (
        top["chief_cpu_us_per_closure_median"] / base["chief_cpu_us_per_closure_median"])
print(json.dumps(summary))
EOF
