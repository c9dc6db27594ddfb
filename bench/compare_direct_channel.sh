#!/usr/bin/env bash
# Sparse pulls and pushes through the tensor channel with the PS serving them straight on
# its shards (the default) and through its actor (TROUPE_CHANNEL_DIRECT=0), alternated
# ROUNDS times, each round a bench_ps run under troupe launch (1 PS, 1 worker). One JSON
# line per mode, width and row count with the medians over rounds of bench_ps's medians,
# and the direct/actor ratios.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../build/bin}
rounds=${ROUNDS:-3}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for _ in $(seq "$rounds"); do
  for direct in 1 0; do
    TROUPE_CHANNEL_DIRECT=$direct "$bin/troupe" launch --ps 1 --workers 1 -- \
      "$bin/bench_ps" --memory-closures 0 --closures 2000 --rounds 1 --reps "${REPS:-30}" \
      2>/dev/null | grep '^{"bench":"ps_sparse"' | sed "s/^/{\"direct\":$direct,\"run\":/; s/\$/}/" >>"$out"
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = statistics.median
keys = ["pull_rows_per_sec", "push_rows_per_sec", "pull_us", "push_us",
        "pull_vs_tcp_plus_gather", "push_vs_tcp_plus_gather", "pull_vs_tcp", "push_vs_tcp"]
by = {}
for r in rows:
    k = (r["run"]["row_floats"], r["run"]["unique_rows"])
    by.setdefault(k, {}).setdefault(r["direct"], []).append(r["run"])
for (width, unique), modes in sorted(by.items()):
    line = {"bench": "direct_channel", "row_floats": width, "unique_rows": unique}
    for direct, runs in modes.items():
        tag = "direct" if direct else "actor"
        for k in keys:
            line[tag + "_" + k] = med(x[k] for x in runs)
    if 0 in modes and 1 in modes:
        line["pull_speedup"] = line["direct_pull_rows_per_sec"] / line["actor_pull_rows_per_sec"]
        line["push_speedup"] = line["direct_push_rows_per_sec"] / line["actor_push_rows_per_sec"]
    print(json.dumps(line))
PY
