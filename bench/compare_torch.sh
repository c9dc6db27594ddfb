#!/usr/bin/env bash
# Runs bench_train_step and its PyTorch counterpart (OpenBLAS, one thread) alternately, ROUNDS
# times, and prints per configuration the median examples/s of each and their ratio as JSON
# lines. Needs python3-torch and libopenblas0-serial (see ../shared/peers/README.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../build/bin}
rounds=${ROUNDS:-3}
models=${MODELS:-mlp,cnn}
batches=${BATCHES:-32,128,512}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for _ in $(seq "$rounds"); do
  IFS=, read -ra model_list <<<"$models"
  IFS=, read -ra batch_list <<<"$batches"
  "$bin/bench_train_step" --models "${model_list[@]}" --batches "${batch_list[@]}" --runs 3 |
    grep '"train_step"' >>"$out"
  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-serial /usr/bin/python3 "$here/torch_train_step.py" \
    --models "$models" --batches "$batches" --runs 3 >>"$out"
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
keys = sorted({(r["model"], r["batch"]) for r in rows})
summary = []
for model, batch in keys:
    ours = [r["examples_per_sec_median"] for r in rows if r["bench"] == "train_step" and (r["model"], r["batch"]) == (model, batch)]
    theirs = [r["examples_per_sec_median"] for r in rows if r["bench"] == "torch_train_step" and (r["model"], r["batch"]) == (model, batch)]
    blas = sorted({r.get("blas") for r in rows if r["bench"] == "torch_train_step"})
    line = {"bench": "train_step_vs_torch", "model": model, "batch": batch, "rounds": len(ours),
            "troupe_examples_per_sec": statistics.median(ours), "torch_examples_per_sec": statistics.median(theirs),
            "ratio": statistics.median(ours) / statistics.median(theirs), "torch_blas": ",".join(b for b in blas if b)}
    print(json.dumps(line))
    summary.append({"model": model, "batch": batch, "ratio": line["ratio"]})
print(json.dumps({"bench": "train_step_vs_torch_summary", "results": summary}))
PY
