#!/usr/bin/env bash
# Packs what the GPU checks need for a bare CUDA machine (nvcc, the driver and CUDA's own
# libraries, none of Debian's) into one archive: the GPU test suites, bench_gpu, troupe,
# fmnist_local, fmnist_mirrored, ctr_ps and ctr_datagen, stripped, and the CUDA backend
# module they load (lib/libtroupe_gpu.so); every shared library
# they load that is not glibc's, libstdc++'s, libgcc's or CUDA's; the Keras layer fixtures
# and a few model fixtures with their data; a Fashion-MNIST (its test split serving as the
# training split, to stay small); the PyTorch peer (bench/compare_gpu.sh,
# bench/torch_gpu_peer.py); and scripts/gpu-check.sh, which runs it all there.
# Usage: scripts/gpu-bundle.sh [BUILD_DIR] [OUT_DIR]   (default: build .gpu)
# The build must have TROUPE_WITH_CUDA on and its keras fixtures made (make test makes them).
set -euo pipefail
build="${1:-build}"
out="${2:-.gpu}"
here="$(cd "$(dirname "$0")/.." && pwd)"
progs=(gpu_tests gpu_layer_tests bench_gpu troupe fmnist_local fmnist_mirrored ctr_ps ctr_datagen)
models=(ps_tutorial deepfm wide_deep dcn_v2 two_output mwms_cnn)
limit_mib=56

for p in "${progs[@]}"; do
  [ -x "$build/bin/$p" ] || { echo "gpu-bundle: $build/bin/$p is missing (a CUDA build?)" >&2; exit 1; }
done
fixtures="$build/keras-fixtures"
[ -d "$fixtures/layers" ] || { echo "gpu-bundle: $fixtures/layers is missing (run make test once)" >&2; exit 1; }

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/fixtures/models" "$stage/fmnist"
for p in "${progs[@]}"; do
  cp "$build/bin/$p" "$stage/bin/"
  strip "$stage/bin/$p"
done
# The CUDA backend, which the programs load from ../lib when a GPU is asked for.
module="$build/lib/libtroupe_gpu.so"
[ -f "$module" ] || { echo "gpu-bundle: $module is missing (a CUDA build?)" >&2; exit 1; }
cp "$module" "$stage/lib/"
strip --strip-unneeded "$stage/lib/libtroupe_gpu.so"
# The libraries outside what every CUDA machine has, under their sonames.
for p in "${progs[@]}"; do ldd "$build/bin/$p"; done | cat - <(ldd "$module") |
  awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  grep -v -E '^(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^ ]*)\.so|/usr/local/cuda' |
  while read -r soname path; do
    cp -L "$path" "$stage/lib/$soname"
    strip --strip-unneeded "$stage/lib/$soname" 2>/dev/null || true
  done
cp -r "$fixtures/layers" "$stage/fixtures/"
for m in "${models[@]}"; do
  mkdir -p "$stage/fixtures/models/$m"
  cp "$fixtures/models/$m"/{info.json,model.keras,train.tfrecord,test.tfrecord} \
    "$stage/fixtures/models/$m/"
done
fm=/usr/share/datasets/fashion-mnist
cp "$fm/t10k-images-idx3-ubyte.gz" "$stage/fmnist/train-images-idx3-ubyte.gz"
cp "$fm/t10k-labels-idx1-ubyte.gz" "$stage/fmnist/train-labels-idx1-ubyte.gz"
cp "$fm"/t10k-*.gz "$stage/fmnist/"
cp "$here/scripts/gpu-check.sh" "$here/bench/compare_gpu.sh" "$here/bench/torch_gpu_peer.py" \
  "$stage/"

mkdir -p "$out"
tar -C "$stage" -cf - . | xz -T2 -6 > "$out/bundle.tar.xz"
bytes=$(stat -c %s "$out/bundle.tar.xz")
echo "gpu-bundle: $out/bundle.tar.xz, $((bytes / 1048576)) MiB ($(du -sh "$stage" | cut -f1) unpacked)"
if [ "$bytes" -gt $((limit_mib * 1048576)) ]; then
  echo "gpu-bundle: over the ${limit_mib} MiB a device call carries" >&2
  exit 1
fi
