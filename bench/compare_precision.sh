#!/usr/bin/env bash
# What each precision and wire type costs and gains, side by side: ctr_ps (2 PS x 2
# workers, DeepFM), fmnist_ps (2 PS x 2 workers) and fmnist_mirrored (2 workers, the
# gradients' all-reduce in the wire type; deterministic for a seed, so round r runs seed r),
# each configuration run in turn within every round (so machine noise hits them alike),
# ROUNDS rounds. One JSON line
# per configuration with medians (examples/s, AUC or test accuracy) and their ratio and
# difference against float32 with a float32 wire, then a summary line.
#   CONFIGS: "precision/wire ..." (default: float32/float32 float32/bf16
#            mixed_bfloat16/float32 mixed_bfloat16/bf16)
#   CTR_ARGS: ctr_ps's model and data flags; JOBS: "ctr fmnist mirrored" (default all)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../build/bin}
rounds=${ROUNDS:-3}
configs=${CONFIGS:-"float32/float32 float32/bf16 mixed_bfloat16/float32 mixed_bfloat16/bf16"}
jobs=${JOBS:-"ctr fmnist mirrored"}
data=${DATA:-/tmp/troupe-ctr-precision}
ctr_args=${CTR_ARGS:-"--format tfrecord --batch 1024 --dim 16 --hidden 400 --hidden 400 \
--hidden 400 --buckets-per-field 4096 --lr 0.05 --optimizer adam --steps-per-worker 400 --cache"}
if [ ! -f "$data/teacher.json" ]; then
  "$bin/ctr_datagen" --out "$data" --rows "${ROWS:-1000000}" --files 4 --vocab 50 \
    --format tfrecord --buckets-per-field 4096 >/dev/null
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for round in $(seq "$rounds"); do
  for job in $jobs; do
    for c in $configs; do
      p=${c%/*} w=${c#*/}
      if [ "$job" = ctr ]; then
        line=$("$bin/troupe" launch --ps 2 --workers 2 -- "$bin/ctr_ps" --data "$data" $ctr_args \
          --precision "$p" --wire-dtype "$w" 2>/dev/null | tail -1)
      elif [ "$job" = mirrored ]; then
        line=$("$bin/troupe" launch --workers 2 -- "$bin/fmnist_mirrored" --seed "$round" \
          --precision "$p" --wire-dtype "$w" 2>/dev/null | tail -1)
      else
        line=$("$bin/troupe" launch --ps 2 --workers 2 -- "$bin/fmnist_ps" \
          --precision "$p" --wire-dtype "$w" 2>/dev/null | tail -1)
      fi
      echo "{\"job\":\"$job\",\"precision\":\"$p\",\"wire\":\"$w\",\"run\":$line}" >>"$out"
    done
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = statistics.median
summary = {"bench": "compare_precision", "rounds": 0, "results": []}
base, b_runs = {}, {}
for job in dict.fromkeys(r["job"] for r in rows):
    for key in dict.fromkeys((r["precision"], r["wire"]) for r in rows if r["job"] == job):
        runs = [r["run"].get("chief", {}) for r in rows
                if r["job"] == job and (r["precision"], r["wire"]) == key]
        ok = [c for c in runs if c.get("ok")]
        quality = "auc" if job == "ctr" else "test_accuracy"
        line = {"bench": "compare_precision", "job": job, "precision": key[0], "wire": key[1],
                "runs": len(runs), "ok_runs": len(ok)}
        if ok:
            line["examples_per_sec_median"] = med(c["examples_per_sec"] for c in ok)
            line[quality + "_median"] = med(c[quality] for c in ok)
            line[quality + "_all"] = [c[quality] for c in ok]
            if job == "ctr":
                line["bytes_per_step"] = ok[0].get("bytes_per_step")
            if job == "mirrored":  # what the chief sent to its neighbour, per step
                line["ring_bytes_per_step"] = ok[0]["ring_bytes_sent"] / ok[0]["steps"]
            if key == ("float32", "float32"):
                base[job] = line
                b_runs[job] = runs
            b = base.get(job)
            if b:
                line["speed_vs_float32"] = line["examples_per_sec_median"] / b["examples_per_sec_median"]
                line[quality + "_minus_float32"] = line[quality + "_median"] - b[quality + "_median"]
                if job == "mirrored":  # the same seeds on both sides: differences pair up
                    pairs = [(c, d) for c, d in zip(runs, b_runs[job]) if c.get("ok") and d.get("ok")]
                    line[quality + "_paired_differences"] = [c[quality] - d[quality] for c, d in pairs]
        summary["rounds"] = max(summary["rounds"], len(runs))
        summary["results"].append(line)
        print(json.dumps(line))
print(json.dumps(summary))
PY
