#!/usr/bin/env bash
# Gradient reduction during the backward pass (BucketedAllReduce on the collective engine)
# against reduction after it (--no-overlap), and, with BEFORE=dir, against the
# fmnist_mirrored binary in dir (an older build: the ring driven on the step's thread),
# for the 100k-parameter MLP and the 2.9M-parameter deep MLP, 2 workers under troupe
# launch, alternated ROUNDS times. With QDISC (a tc qdisc, say "tbf rate 1gbit burst 256kb
# latency 20ms"; needs root) the two workers run on network-namespace hosts of their own
# (tests/multihost/netns_cluster.sh) over TCP links shaped by it, as across machines.
# MODELS picks the models ("mlp deep_mlp"). One JSON line per run, then one per model with
# each variant's median examples/s and its ratio to --no-overlap of the same build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../build/bin}
rounds=${ROUNDS:-5}
before=${BEFORE:-}
qdisc=${QDISC:-}
models=${MODELS:-mlp deep_mlp}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
run() {  # variant model binary args...
  local variant=$1 model=$2 binary=$3 steps
  shift 3
  steps=938
  [ "$model" = deep_mlp ] && steps=200
  if [ -n "$qdisc" ]; then
    steps=$((steps / 2))
    "$here/../tests/multihost/netns_cluster.sh" "$(dirname "$binary")" "$(basename "$binary")" \
      0 2 --qdisc "$qdisc" -- --model "$model" --steps "$steps" --no-shared-memory "$@"
  else
    "$bin/troupe" launch --workers 2 -- "$binary" --model "$model" --steps "$steps" "$@"
  fi 2>/dev/null | tail -1 |
    sed "s/^/{\"variant\":\"$variant\",\"model\":\"$model\",\"run\":/; s/\$/}/" | tee -a "$out"
}
for _ in $(seq "$rounds"); do
  for model in $models; do
    run overlap "$model" "$bin/fmnist_mirrored"
    run no_overlap "$model" "$bin/fmnist_mirrored" --no-overlap
    if [ -n "$before" ]; then run before "$model" "$before/fmnist_mirrored"; fi
  done
done
/usr/bin/python3 - "$out" "$qdisc" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
link = sys.argv[2] or "shared memory (troupe launch)"
for model in dict.fromkeys(r["model"] for r in rows):
    med = {}
    for v in ("overlap", "no_overlap", "before"):
        xs = [r["run"]["chief"]["examples_per_sec"] for r in rows
              if r["model"] == model and r["variant"] == v]
        if xs:
            med[v] = statistics.median(xs)
    line = {"bench": "overlap", "model": model, "workers": 2, "link": link, "runs": len(
        [r for r in rows if r["model"] == model and r["variant"] == "overlap"])}
    for v, m in med.items():
        line[v + "_examples_per_sec_median"] = m
        line[v + "_vs_no_overlap"] = m / med["no_overlap"]
    print(json.dumps(line))
PY
