#!/usr/bin/env bash
# Hashed against dynamic embedding tables on a stream: the same raw-id click log
# (ctr_datagen --raw-ids, vocabulary VOCAB, Zipf) written once to a file, then fed to
# ctr_ps through a FIFO by cat (so the producer is not the bound, as a generator feeding the
# FIFO live would be), 1 PS, 1 worker, DeepFM 64-64, dim 8, batch 1024, until the stream ends:
#   fixed     a hashed table of BUCKETS rows per field,
#   dynamic   a dynamic table capped at MAX_ROWS rows, admitted at MIN_COUNT occurrences,
# in turn within each of ROUNDS rounds (machine noise hits both alike). One JSON line per
# configuration (medians of examples/s and PS RSS; for the dynamic table the PS's resident
# growth per row against key + value + slot bytes, from the first memory sample before
# training to the end) and a summary with the dynamic/fixed examples/s ratio.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../build/bin}
rounds=${ROUNDS:-3}
lines=${LINES:-2000000}
buckets=${BUCKETS:-65536}
max_rows=${MAX_ROWS:-1000000}
min_count=${MIN_COUNT:-2}
configs=${CONFIGS:-"fixed dynamic"}
work=${WORK:-/tmp/troupe-stream-tables}
args=${CTR_ARGS:-"--batch 1024 --hidden 64 --hidden 64 --dim 8 --lr 0.2 --steps-per-worker 0 --stats-interval-ms 2000"}
mkdir -p "$work"
log="$work/log-$lines.txt"
if [ ! -f "$work/ready-$lines" ]; then
  rm -rf "$work/data"
  "$bin/ctr_datagen" --out "$work/data" --rows "$lines" --files 1 --heldout-rows 0 --raw-ids \
    --vocab "${VOCAB:-100000000}" --format criteo >/dev/null
  mv "$work"/data/train-*.txt "$log"
  touch "$work/ready-$lines"
fi
cat "$log" >/dev/null  # into the page cache, for every run alike
declare -A flags=(
  [fixed]="--table fixed --buckets-per-field $buckets"
  [dynamic]="--table dynamic --max-rows $max_rows --min-count $min_count")
out=$(mktemp)
fifo="$work/fifo"
feeder=
trap 'rm -f "$out" "$fifo"; [ -n "$feeder" ] && kill "$feeder" 2>/dev/null || true' EXIT
for round in $(seq "$rounds"); do
  for c in $configs; do
    rm -f "$fifo"
    mkfifo "$fifo"
    cat "$log" >"$fifo" &
    feeder=$!
    line=$("$bin/troupe" launch --ps 1 --workers 1 -- "$bin/ctr_ps" --data "$fifo" $args \
      ${flags[$c]} 2>/dev/null | tail -1)
    kill "$feeder" 2>/dev/null || true
    wait "$feeder" 2>/dev/null || true
    feeder=
    echo "{\"config\":\"$c\",\"run\":$line}" >>"$out"
  done
done
python3 - "$out" "$here" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
from table_runs import med, summarize


def extra(config, ok, base):
    # The dynamic table's resident growth per row, from the first sample (before training)
    # to the end, over what a row must hold: key, value and optimizer slot (Adagrad: one).
    ratios = []
    for c in ok:
        samples = c.get("ps_memory_over_time") or []
        if config == "fixed" or not samples or c["table_rows"] <= 0:
            continue
        payload = 8 + 2 * 4 * c["table_width"]
        grown = max(c["ps_rss_bytes"]) - samples[0]["ps_rss_bytes"][0]
        ratios.append(grown / (c["table_rows"] * payload))
    return {"rss_growth_per_row_vs_payload_median": med(ratios)} if ratios else {}


summarize("stream_tables", sys.argv[1], extra)
PY
