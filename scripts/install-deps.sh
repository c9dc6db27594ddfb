#!/usr/bin/env bash
# Installs every Debian package Troupe needs to build, test and run its examples.
# Idempotent and quiet: does nothing when everything is already installed.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libcaf-dev            # actors and remoting (CAF 0.17.6)
  libeigen3-dev         # dense math in core/
  libdnnl-dev           # oneDNN: the CPU's matrix products, float32 and bfloat16
  ocl-icd-opencl-dev    # oneDNN's CMake config requires OpenCL (only Recommended by libdnnl-dev)
  libmsgpack-cxx-dev    # wire codec for closure arguments
  libfmt-dev libspdlog-dev
  catch2                # unit tests (v2)
  nlohmann-json3-dev    # TF_CONFIG, JSON result lines
  libcli11-dev          # command lines of tools and examples
  zlib1g-dev            # gzip-compressed IDX files of Fashion-MNIST
  libssl-dev            # TLS 1.3 on the job's links (TROUPE_TLS), OpenSSL 3
  dataset-fashion-mnist # the real dataset, under /usr/share/datasets/fashion-mnist/
  protobuf-compiler     # tests decode TensorBoard event files with protoc --decode_raw
  iproute2              # the multi-host tests: ip netns, veth, a bridge, tc
  clang libclang-rt-dev # make fuzz: libFuzzer and the sanitizers' runtimes for clang
  slurmctld slurmd slurm-client munge  # the Slurm test runs a private Slurm (srun)
  python3-yaml          # the TFJob test reads the manifests of deploy/
  libzip-dev libhdf5-dev  # Keras .keras files (core/keras): the zip and the HDF5 weights in it
  python3-venv          # the Keras test fixtures' virtual environment (scripts/keras-venv.sh)
  pybind11-dev python3-dev  # `import troupe`: the extension module (python/)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  sudo=sudo
else
  sudo=
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
