#!/usr/bin/env bash
# fmnist_ps (2 PS x 2 workers) across network-namespace hosts (tests/multihost/
# netns_cluster.sh): unshaped veth links against links shaped by tbf, alternated RUNS
# times. One JSON line per shape: median examples/s and its ratio to the unshaped median
# of the same run set. Needs root.
# Usage: bench/netns_shaped.sh [BUILD_DIR] [RUNS] [STEPS_PER_WORKER]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$here/build}" runs="${2:-3}" steps="${3:-2000}"
shapes=("none" "tbf rate 1gbit burst 256kb latency 20ms" "tbf rate 100mbit burst 64kb latency 20ms")
declare -A samples
for ((r = 0; r < runs; r++)); do
  for shape in "${shapes[@]}"; do
    args=()
    [ "$shape" = none ] || args=(--qdisc "$shape")
    line=$("$here/tests/multihost/netns_cluster.sh" "$build/bin" fmnist_ps 2 2 "${args[@]}" \
      -- --steps-per-worker "$steps" 2>/dev/null | tail -1)
    eps=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); c=d.get("chief") or {}; print(c.get("examples_per_sec", "skip" if "skipped" in d else "fail"))' "$line")
    samples["$shape"]+="$eps "
  done
done
for shape in "${shapes[@]}"; do
  python3 - "$shape" "${samples[$shape]}" "${samples[none]}" <<'PY'
import json, statistics, sys
shape, xs, base = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
ok = lambda v: [float(x) for x in v if x not in ("skip", "fail")]
m, b = ok(xs), ok(base)
out = {"bench": "netns_shaped", "program": "fmnist_ps", "ps": 2, "workers": 2,
       "link": "unshaped veth" if shape == "none" else shape, "runs": len(xs), "failed_runs": len(xs) - len(m)}
if m:
    out["examples_per_sec_median"] = statistics.median(m)
    out["samples"] = m
if m and b:
    out["ratio_to_unshaped"] = statistics.median(m) / statistics.median(b)
print(json.dumps(out))
PY
done
