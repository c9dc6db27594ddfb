#!/usr/bin/env bash
# fmnist_ps (2 PS x 2 workers) across network-namespace hosts (tests/multihost/
# netns_cluster.sh): unshaped veth links against links shaped by tbf, alternated RUNS
# times. One JSON line per configuration: median examples/s and its ratio to the
# unshaped median of the same run set. With MODE "tls": unshaped and 1 Gbit/s, each with
# and without TLS on every link (TROUPE_TLS=1), the TLS lines also as a ratio to the same
# link without TLS. Needs root.
# Usage: bench/netns_shaped.sh [BUILD_DIR] [RUNS] [STEPS_PER_WORKER] [MODE: shapes|tls]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$here/build}" runs="${2:-3}" steps="${3:-2000}" mode="${4:-shapes}"
gbit="tbf rate 1gbit burst 256kb latency 20ms"
if [ "$mode" = tls ]; then
  configs=("none|0" "none|1" "$gbit|0" "$gbit|1")
else
  configs=("none|0" "$gbit|0" "tbf rate 100mbit burst 64kb latency 20ms|0")
fi
declare -A samples
for ((r = 0; r < runs; r++)); do
  for config in "${configs[@]}"; do
    shape="${config%|*}" tls="${config##*|}"
    args=()
    [ "$shape" = none ] || args=(--qdisc "$shape")
    line=$(TROUPE_TLS="$tls" "$here/tests/multihost/netns_cluster.sh" "$build/bin" fmnist_ps 2 2 \
      "${args[@]}" -- --steps-per-worker "$steps" 2>/dev/null | tail -1)
    eps=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); c=d.get("chief") or {}; print(c.get("examples_per_sec", "skip" if "skipped" in d else "fail"))' "$line")
    samples["$config"]+="$eps "
  done
done
for config in "${configs[@]}"; do
  python3 - "$config" "${samples[$config]}" "${samples[none|0]}" "${samples[${config%|*}|0]}" <<'PY'
import json, statistics, sys
config, xs, base, same_link = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()
shape, tls = config.rsplit("|", 1)
ok = lambda v: [float(x) for x in v if x not in ("skip", "fail")]
m, b, s = ok(xs), ok(base), ok(same_link)
out = {"bench": "netns_shaped", "program": "fmnist_ps", "ps": 2, "workers": 2,
       "link": "unshaped veth" if shape == "none" else shape, "tls": tls == "1",
       "runs": len(xs), "failed_runs": len(xs) - len(m)}
if m:
    out["examples_per_sec_median"] = statistics.median(m)
    out["samples"] = m
if m and b:
    out["ratio_to_unshaped"] = statistics.median(m) / statistics.median(b)
if m and s and tls == "1":
    out["tls_over_plain_same_link"] = statistics.median(m) / statistics.median(s)
print(json.dumps(out))
PY
done
