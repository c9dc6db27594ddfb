#!/usr/bin/env bash
# The ring against Open MPI's MPI_Allreduce on this host, 2 ranks each, alternated ROUNDS
# times: bench_allreduce under troupe launch (shared memory between the ranks, and with
# --transport tcp plain TCP) next to ../shared/peers/mpi_allreduce_bw.c over Open MPI's
# TCP transport (btl tcp on lo) and its shared-memory one (btl vader), both with the glibc
# tunables its README gives so that Open MPI's >= 32 MiB temporaries are not a page-fault
# cliff. Prints one JSON line per size with every median and the ratios. Needs
# libopenmpi-dev and openmpi-bin (see ../shared/peers/README.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../build/bin}
peers=${PEERS:-$here/../../shared/peers}
rounds=${ROUNDS:-3}
sizes="1024 65536 1048576 16777216 67108864"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpicc -O2 -o "$work/mpi_allreduce_bw" "$peers/mpi_allreduce_bw.c"
tunables='glibc.malloc.mmap_threshold=1073741824:glibc.malloc.trim_threshold=4294967295'
mpi() {  # $1: btl
  GLIBC_TUNABLES=$tunables mpirun --allow-run-as-root --oversubscribe -np 2 -x GLIBC_TUNABLES \
    --mca pml ob1 --mca btl "self,$1" --mca btl_tcp_if_include lo "$work/mpi_allreduce_bw" \
    $sizes 2>/dev/null | grep '^{'
}
troupe() {  # $1: auto (shared memory) or tcp
  "$bin/troupe" launch --workers 2 -- "$bin/bench_allreduce" --seconds 0.5 --transport "$1" \
    2>/dev/null | tail -1 | python3 -c '
import json, sys
for s in json.loads(sys.stdin.read())["chief"]["sizes"]:
    print(json.dumps({"bytes": s["bytes"], "lat_us_median": s["lat_us_median"]}))'
}
for _ in $(seq "$rounds"); do
  troupe auto | sed 's/^/{"variant":"troupe_shm","run":/; s/$/}/' >>"$work/out"
  troupe tcp | sed 's/^/{"variant":"troupe_tcp","run":/; s/$/}/' >>"$work/out"
  mpi vader | sed 's/^/{"variant":"mpi_sm","run":/; s/$/}/' >>"$work/out"
  mpi tcp | sed 's/^/{"variant":"mpi_tcp","run":/; s/$/}/' >>"$work/out"
done
python3 - "$work/out" <<'PY'
import json, statistics, sys
lat = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    lat.setdefault((r["variant"], r["run"]["bytes"]), []).append(r["run"]["lat_us_median"])
for b in sorted({b for _, b in lat}):
    m = {v: statistics.median(lat.get((v, b), [float("nan")]))
         for v in ("troupe_shm", "troupe_tcp", "mpi_sm", "mpi_tcp")}
    print(json.dumps({"bench": "allreduce_vs_openmpi", "bytes": b, "ranks": 2,
                      **{v + "_lat_us_median": t for v, t in m.items()},
                      "troupe_shm_vs_mpi_sm": m["mpi_sm"] / m["troupe_shm"],
                      "troupe_tcp_vs_mpi_tcp": m["mpi_tcp"] / m["troupe_tcp"]}))
PY
