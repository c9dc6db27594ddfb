#!/usr/bin/env bash
# fmnist_ps (tensor channel, and CAF messages) against PyTorch's RPC parameter server
# (../shared/peers/torch_rpc_ps_fmnist.py: default pull-then-push and --fused), 1 PS and
# 2 workers each, the four alternated ROUNDS times. Prints one JSON line per variant with
# its median examples/s and test accuracies, then one line of ratios. Needs python3-torch
# and libopenblas0-serial (see ../shared/peers/README.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../build/bin}
peer=${PEER:-$here/../../shared/peers/torch_rpc_ps_fmnist.py}
rounds=${ROUNDS:-3}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
torch() {
  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-serial /usr/bin/python3 "$peer" "$@" 2>/dev/null |
    grep '^{' | tail -1
}
for _ in $(seq "$rounds"); do
  for transport in channel caf; do
    line=$("$bin/troupe" launch --ps 1 --workers 2 -- "$bin/fmnist_ps" --tensor-transport "$transport" 2>/dev/null | tail -1)
    echo "{\"variant\":\"troupe_$transport\",\"run\":$line}" >>"$out"
  done
  echo "{\"variant\":\"torch_rpc\",\"run\":$(torch)}" >>"$out"
  echo "{\"variant\":\"torch_rpc_fused\",\"run\":$(torch --fused)}" >>"$out"
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def rate(r):
    run = r["run"]
    return run["chief"]["examples_per_sec"] if "chief" in run else run["examples_per_sec"]
def acc(r):
    run = r["run"]
    return run["chief"]["test_accuracy"] if "chief" in run else run["test_acc"]
med = {}
for v in ["troupe_channel", "troupe_caf", "torch_rpc", "torch_rpc_fused"]:
    rs = [r for r in rows if r["variant"] == v]
    med[v] = statistics.median(rate(r) for r in rs)
    print(json.dumps({"bench": "fmnist_ps_vs_torch", "variant": v, "runs": [round(rate(r)) for r in rs],
                      "examples_per_sec_median": med[v],
                      "test_accuracy_median": statistics.median(acc(r) for r in rs),
                      "test_accuracy_min": min(acc(r) for r in rs),
                      "test_accuracy": sorted(acc(r) for r in rs)}))
print(json.dumps({"bench": "fmnist_ps_vs_torch_ratios",
                  "channel_vs_torch": med["troupe_channel"] / med["torch_rpc"],
                  "channel_vs_torch_fused": med["troupe_channel"] / med["torch_rpc_fused"],
                  "caf_vs_torch": med["troupe_caf"] / med["torch_rpc"],
                  "channel_vs_caf": med["troupe_channel"] / med["troupe_caf"]}))
PY
