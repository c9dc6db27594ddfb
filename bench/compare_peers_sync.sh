#!/usr/bin/env bash
# Synchronous training against its peers on this host, 2 ranks each, alternated ROUNDS
# times: bench_allreduce (the ring) next to PyTorch gloo's all_reduce
# (../shared/peers/torch_allreduce_bw.py) per size, and fmnist_mirrored next to PyTorch DDP
# over gloo with OpenBLAS (../shared/peers/torch_ddp_fmnist.py). Prints one JSON line per
# size and one for the training job, each with both medians and their ratio. Needs
# python3-torch and libopenblas0-serial (see ../shared/peers/README.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../build/bin}
peers=${PEERS:-$here/../../shared/peers}
rounds=${ROUNDS:-3}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for _ in $(seq "$rounds"); do
  "$bin/troupe" launch --workers 2 -- "$bin/bench_allreduce" --seconds 0.5 2>/dev/null |
    tail -1 | sed 's/^/{"variant":"troupe_ring","run":/; s/$/}/' >>"$out"
  /usr/bin/python3 "$peers/torch_allreduce_bw.py" 2>/dev/null | grep '^{' |
    sed 's/^/{"variant":"gloo","run":/; s/$/}/' >>"$out"
  "$bin/troupe" launch --workers 2 -- "$bin/fmnist_mirrored" 2>/dev/null |
    tail -1 | sed 's/^/{"variant":"troupe_mirrored","run":/; s/$/}/' >>"$out"
  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-serial /usr/bin/python3 \
    "$peers/torch_ddp_fmnist.py" 2>/dev/null | grep '^{' | tail -1 |
    sed 's/^/{"variant":"torch_ddp","run":/; s/$/}/' >>"$out"
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ring, gloo = {}, {}
for r in rows:
    if r["variant"] == "troupe_ring":
        for s in r["run"]["chief"]["sizes"]:
            ring.setdefault(s["bytes"], []).append(s["lat_us_median"])
    elif r["variant"] == "gloo":
        gloo.setdefault(r["run"]["bytes"], []).append(r["run"]["lat_us_median"])
for b in sorted(ring):
    t, g = statistics.median(ring[b]), statistics.median(gloo.get(b, [float("nan")]))
    print(json.dumps({"bench": "allreduce_vs_gloo", "bytes": b, "ranks": 2,
                      "troupe_lat_us_median": t, "gloo_lat_us_median": g,
                      "troupe_algbw_GBps": b / t / 1e3, "gloo_algbw_GBps": b / g / 1e3,
                      "speedup": g / t}))
mir = [r["run"]["chief"] for r in rows if r["variant"] == "troupe_mirrored"]
ddp = [r["run"] for r in rows if r["variant"] == "torch_ddp"]
t = statistics.median(m["examples_per_sec"] for m in mir)
d = statistics.median(x["examples_per_sec"] for x in ddp)
print(json.dumps({"bench": "fmnist_mirrored_vs_ddp", "workers": 2,
                  "troupe_examples_per_sec_median": t, "ddp_examples_per_sec_median": d,
                  "ratio": t / d,
                  "troupe_test_accuracy": sorted(m["test_accuracy"] for m in mir),
                  "ddp_test_accuracy": sorted(x["test_acc"] for x in ddp)}))
PY
