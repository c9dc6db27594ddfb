# Helpers the comparison scripts share (sourced, not run). They read the caller's settings:
# $lock (a flock file, empty: none), $bin (the build's bin/), $work (the data directory),
# $kpy (the Keras venv's python) and $here (bench/).

# A command under the lock, so that runs of two scripts never share the cores.
locked() { if [ -n "$lock" ]; then flock "$lock" "$@"; else "$@"; fi; }

# A keras_ctr_models.py model as $work/NAME.keras, made once: name, then its arguments.
keras_file() {
  local f=$work/$1.keras
  shift
  [ -f "$f" ] || "$kpy" "$here/keras_ctr_models.py" "$@" --out "$f" >/dev/null 2>&1
  echo "$f"
}

# ctr_datagen's TFRecord click logs in DIR, made once: dir vocab buckets.
ctr_data() {
  [ -f "$1/teacher.json" ] || locked "$bin/ctr_datagen" --out "$1" --rows 400000 --files 4 \
    --vocab "$2" --format tfrecord --buckets-per-field "$3" >/dev/null
}
