"""fit() from Python, for bench/compare_python.sh: the same .keras model, files and batch
as a `troupe train` run, through `import troupe`. Prints one JSON line: the History's last
epoch (examples_per_sec is fit()'s own, as troupe train's is)."""

import argparse
import json

import troupe
import troupe.keras

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--model", required=True)
p.add_argument("--data", nargs="+", required=True)
p.add_argument("--format", required=True)
p.add_argument("--batch", type=int, required=True)
p.add_argument("--epochs", type=int, default=1)
p.add_argument("--shuffle", type=int, default=0)
p.add_argument("--callback", action="store_true",
               help="also a Python callback with on_train_batch_end (called every step)")
a = p.parse_args()


class Batches:
    def __init__(self):
        self.seen = 0

    def on_train_batch_end(self, batch, logs=None):
        self.seen += 1


model = troupe.keras.load_model(a.model)
# troupe train drops a last partial batch: the same batches here.
ds = troupe.data.Dataset.from_files(a.data, a.format).batch(a.batch, drop_remainder=True)
if a.shuffle:
    ds = ds.shuffle(a.shuffle)
callbacks = [Batches()] if a.callback else []
h = model.fit(ds, epochs=a.epochs, callbacks=callbacks)
out = {"ok": True, "program": "python_fit.py", "batch": a.batch, "callback": a.callback}
out.update({k: v[-1] for k, v in h.history.items()})
out.update(h.stats)
print(json.dumps(out), flush=True)
