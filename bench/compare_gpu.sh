#!/usr/bin/env bash
# On a GPU machine: bench_gpu and PyTorch on the same GPU (bench/torch_gpu_peer.py, eager
# and torch.compile) alternately, ROUNDS times; prints per model, batch and precision the
# median examples/s of Troupe and of each PyTorch mode and their ratios as JSON lines, then
# a summary line. PYTHON: an interpreter with torch built for CUDA (the GPU image's);
# TORCH_ARGS: more arguments for the peer (--modes, --precisions, --seconds, ...).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../build/bin}
rounds=${ROUNDS:-3}
python=${PYTHON:-python3}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for _ in $(seq "$rounds"); do
  "$bin/bench_gpu" --runs 3 | grep -v '"gpu_summary"' >>"$out"
  # shellcheck disable=SC2086  # TORCH_ARGS is a list of arguments
  "$python" "$here/torch_gpu_peer.py" --device cuda --runs 3 ${TORCH_ARGS:-} |
    grep -v '"torch_gpu_summary"' >>"$out"
done
"$python" - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ours = [r for r in rows if r["bench"] == "gpu_train_step"]
theirs = [r for r in rows if r["bench"] == "torch_train_step"]
keys = sorted({(r["model"], r["batch"], r["precision"]) for r in ours})
summary = []
for model, batch, precision in keys:
    pick = lambda rs, **kw: [r["examples_per_sec"] for r in rs if (r["model"], r["batch"], r["precision"]) == (model, batch, precision) and all(r.get(k) == v for k, v in kw.items())]
    t = pick(ours)
    line = {"bench": "gpu_vs_torch", "model": model, "batch": batch, "precision": precision,
            "rounds": len(t), "troupe_examples_per_sec": statistics.median(t)}
    for mode in ("eager", "compile"):
        p = pick(theirs, mode=mode)
        if p:
            line["torch_" + mode + "_examples_per_sec"] = statistics.median(p)
            line["vs_torch_" + mode] = statistics.median(t) / statistics.median(p)
    print(json.dumps(line))
    summary.append({k: line[k] for k in line if k in ("model", "batch", "precision", "vs_torch_eager", "vs_torch_compile")})
for r in rows:
    if r["bench"] in ("gpu_copy", "gpu_dense", "gpu_gemm_peak"):
        print(json.dumps(r))
print(json.dumps({"bench": "gpu_vs_torch_summary", "results": summary}))
PY
