#!/usr/bin/env bash
# Runs every libFuzzer target of a TROUPE_FUZZ build for SECONDS each, from the seeds
# fuzz_seeds writes plus what earlier runs found (BUILD/fuzz-corpus). A crash, leak,
# sanitizer report or timeout fails the run and leaves the input under BUILD/fuzz-crashes.
# One JSON line per target, then a summary line.
# Usage: scripts/run-fuzzers.sh BUILD SECONDS
set -uo pipefail
build="$1" seconds="${2:-60}"
bin="$build/bin"
seeds="$build/fuzz-seeds" corpus="$build/fuzz-corpus" crashes="$build/fuzz-crashes"
rm -rf "$seeds" && mkdir -p "$corpus" "$crashes"
"$bin/fuzz_seeds" "$seeds" >/dev/null || { echo '{"ok":false,"error":"fuzz_seeds failed"}'; exit 1; }
failed=0 targets=0
for target in "$bin"/fuzz_*; do
  name=$(basename "$target")
  [ "$name" = fuzz_seeds ] && continue
  targets=$((targets + 1))
  mkdir -p "$corpus/$name" "$crashes/$name"
  seed_dir="$seeds/$name"
  [ -d "$seed_dir" ] || seed_dir=""
  log="$build/$name.fuzz.log"
  "$target" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$crashes/$name/" "$corpus/$name" $seed_dir > "$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  if [ "$rc" -ne 0 ]; then
    failed=$((failed + 1))
    grep -m 5 -E "ERROR|SUMMARY|runtime error|Test unit written" "$log" >&2
  fi
  echo "{\"fuzz_target\":\"$name\",\"ok\":$([ $rc = 0 ] && echo true || echo false),\"seconds\":$seconds,\"runs\":${runs:-0},\"coverage\":${cov:-0},\"corpus\":$(ls "$corpus/$name" | wc -l)}"
done
echo "{\"program\":\"run-fuzzers\",\"ok\":$([ $failed = 0 ] && echo true || echo false),\"targets\":$targets,\"failed\":$failed}"
[ "$failed" -eq 0 ]
