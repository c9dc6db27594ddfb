#!/usr/bin/env bash
# Runs every GPU check of a bundle (scripts/gpu-bundle.sh) on a machine with a GPU and
# CUDA's libraries, and writes what it saw under $OUT (default /tmp/gpu-check):
#   summary.txt        one line per check: its exit status and what it was
#   gpu_tests.log, gpu_layer_tests.log   the suites' output (each case alone where a
#                      whole run died on a signal or a timeout)
#   bench_gpu.jsonl    bench_gpu's JSON lines (a DeepFM step's time by part and layer in "profile")
#   compare_gpu.jsonl  bench/compare_gpu.sh: PyTorch's steps against bench_gpu's
#   programs.log       fmnist_local and troupe train on the CPU and on the GPU, then jobs
#                      of several processes (GPU_CHECK_JOBS=0 leaves them out), and the
#                      last JSON line of each
# Usage: scripts/gpu-check.sh [BUNDLE]   (default .gpu/bundle.tar.xz)
set -uo pipefail
bundle="${1:-.gpu/bundle.tar.xz}"
out="${OUT:-/tmp/gpu-check}"
mkdir -p "$out"
B="$(mktemp -d /tmp/troupe-gpu.XXXX)"
tar -C "$B" -xJf "$bundle" || { echo "gpu-check: cannot unpack $bundle" >&2; exit 1; }
summary="$out/summary.txt"
: > "$summary"

# CUDA's libraries where this machine keeps them: the toolkit's, and cuDNN's and NCCL's
# from Python packages where the image has them only there.
cuda_dirs=""
for so in libcudart.so.13 libcublasLt.so.13 libcublas.so.13 libcudnn.so.9 libnccl.so.2; do
  f="$(find /usr/local/cuda/ /usr/local/cuda*/ /usr/lib /opt -name "$so" 2>/dev/null | head -1)"
  if [ -z "$f" ]; then echo "missing-library $so" >> "$summary"; continue; fi
  cuda_dirs="$cuda_dirs:$(dirname "$f")"
done
export LD_LIBRARY_PATH="$B/lib$cuda_dirs"
export TROUPE_KERAS_FIXTURES="$B/fixtures"
nvidia-smi -L >> "$summary" 2>&1

note() { echo "$*" >> "$summary"; }

# A suite whole; where it dies (a signal, a timeout), each of its cases alone.
suite() {
  local name="$1" log="$out/$1.log" rc
  timeout 300 "$B/bin/$name" --durations yes > "$log" 2>&1
  rc=$?
  note "$rc $name (whole suite)"
  if [ "$rc" -ge 124 ]; then
    "$B/bin/$name" --list-test-names-only | grep . | while IFS= read -r t; do
      local spec="${t//,/\\,}"
      spec="${spec//[/\\[}"
      echo "=== $t" >> "$log"
      timeout 120 "$B/bin/$name" "$spec" >> "$log" 2>&1
      note "$? $name: $t"
    done
  fi
}
suite gpu_tests
suite gpu_layer_tests

timeout 240 "$B/bin/bench_gpu" --runs 3 --seconds 0.2 --profile > "$out/bench_gpu.jsonl" 2>&1
note "$? bench_gpu"

# Whole programs on the CPU and the GPU: the same steps from the same seed.
log="$out/programs.log"
: > "$log"
program() {
  local what="$1"; shift
  echo "=== $what: $*" >> "$log"
  timeout 240 "$@" > "$B/run.out" 2>&1
  local rc=$?
  tail -n 30 "$B/run.out" >> "$log"
  note "$rc $what $(tail -n 1 "$B/run.out")"
}
for dev in cpu cuda:0; do
  program "fmnist_local mlp $dev" "$B/bin/fmnist_local" --model mlp --data-dir "$B/fmnist" \
    --epochs 1 --max-steps 300 --batch 64 --device "$dev"
  program "fmnist_local cnn $dev" "$B/bin/fmnist_local" --model cnn --data-dir "$B/fmnist" \
    --epochs 1 --max-steps 60 --batch 64 --device "$dev"
done
for p in tf32 mixed_bfloat16 mixed_float16; do
  program "fmnist_local cnn cuda:0 $p" "$B/bin/fmnist_local" --model cnn --data-dir "$B/fmnist" \
    --epochs 1 --max-steps 60 --batch 64 --device cuda:0 --precision "$p"
done
for m in ps_tutorial deepfm wide_deep dcn_v2 two_output mwms_cnn; do
  d="$B/fixtures/models/$m"
  steps=$(sed -n 's/.*"steps": *\([0-9]*\).*/\1/p' "$d/info.json")
  for dev in cpu cuda:0; do
    program "troupe train $m $dev" "$B/bin/troupe" train --model "$d/model.keras" \
      --data "$d/train.tfrecord" --batch 32 --steps "$steps" --validation "$d/test.tfrecord" \
      --device "$dev" --seed 1 --out "$B/$m-${dev/:/}.keras"
  done
done
# Jobs of several processes (troupe launch, 127.0.0.1), their workers on the CPU and then
# on the GPU (all of them on the one GPU there is): a Keras model and the built-in DeepFM
# under parameter servers, the CNN mirrored.
if [ "${GPU_CHECK_JOBS:-1}" = 1 ]; then
  "$B/bin/ctr_datagen" --out "$B/ctr" --rows 100000 --files 4 --format tfrecord --vocab 50 \
    --buckets-per-field 4096 > /dev/null 2>&1
  d="$B/fixtures/models/deepfm"
  for dev in cpu cuda; do
    program "ctr_ps 2 PS x 2 workers $dev" "$B/bin/troupe" launch --ps 2 --workers 2 -- \
      "$B/bin/ctr_ps" --data "$B/ctr" --format tfrecord --buckets-per-field 4096 --batch 1024 \
      --steps-per-worker 40 --device "$dev"
    program "troupe train deepfm 2 PS x 2 workers $dev" "$B/bin/troupe" launch --ps 2 \
      --workers 2 -- "$B/bin/troupe" train --model "$d/model.keras" --data "$d/train.tfrecord" \
      --batch 32 --steps 100 --validation "$d/test.tfrecord" --device "$dev"
    program "fmnist_mirrored 2 workers $dev" "$B/bin/troupe" launch --workers 2 -- \
      "$B/bin/fmnist_mirrored" --data-dir "$B/fmnist" --steps 100 --device "$dev"
  done
fi
# PyTorch on the same GPU (bench/compare_gpu.sh), where this machine's python3 has torch:
# outside the bundle's libraries, bench_gpu through a wrapper that sets them.
if [ "${GPU_CHECK_TORCH:-1}" = 1 ] && env -u LD_LIBRARY_PATH python3 -c 'import torch' 2>/dev/null; then
  mkdir -p "$B/wrap"
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$LD_LIBRARY_PATH" "$B/bin/bench_gpu" \
    > "$B/wrap/bench_gpu"
  chmod +x "$B/wrap/bench_gpu"
  env -u LD_LIBRARY_PATH BIN="$B/wrap" ROUNDS="${GPU_CHECK_TORCH_ROUNDS:-1}" \
    TORCH_ARGS="${GPU_CHECK_TORCH_ARGS:---precisions float32 mixed_bfloat16 --seconds 0.3}" \
    timeout 420 bash "$B/compare_gpu.sh" > "$out/compare_gpu.jsonl" 2>&1
  note "$? compare_gpu (PyTorch on the same GPU) $(tail -n 1 "$out/compare_gpu.jsonl")"
fi
rm -rf "$B"
cat "$summary"
