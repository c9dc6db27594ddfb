#!/usr/bin/env python3
"""Loads a model Troupe trained with Keras itself and checks that Keras predicts what Troupe
predicted on the same inputs.

    check_predictions.py TRAINED.keras INPUTS.npz PREDICTIONS.json [TOL]

INPUTS.npz holds the model's inputs by name (what the data file Troupe read holds);
PREDICTIONS.json is `troupe predict --predictions`'s file: by output name, its shape and
values. Each output must agree within TOL (1e-5) as |troupe - keras| <= TOL * (1 + |keras|).
Prints one JSON line; exit status 0 when every output agrees.
"""

import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import keras  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_fixtures  # noqa: E402,F401  (registers the custom layers the models use)


def main(argv):
    model_path, inputs_path, predictions_path = argv[1:4]
    tol = float(argv[4]) if len(argv) > 4 else 1e-5
    model = keras.saving.load_model(model_path)
    data = np.load(inputs_path)
    inputs = {name: data[name] for name in model.input_names} if hasattr(model, "input_names") \
        else {t.name: data[t.name] for t in model.inputs}
    # Strings as tf.string tensors: only TensorFlow's backend runs a model on strings.
    if any(v.dtype.kind == "U" for v in inputs.values()):
        import tensorflow as tf
        inputs = {k: tf.constant(v) if v.dtype.kind == "U" else v for k, v in inputs.items()}
    got = model.predict(inputs, verbose=0)
    if not isinstance(got, (list, tuple)):
        got = [got]
    troupe = json.load(open(predictions_path))
    report = {"program": "check_predictions", "model": model_path, "outputs": {}}
    ok = True
    for name, keras_out in zip(model.output_names, got):
        t = troupe[name]
        mine = np.asarray(t["values"], dtype=np.float64).reshape(t["shape"])
        ref = np.asarray(keras_out, dtype=np.float64).reshape(mine.shape)
        excess = np.abs(mine - ref) - tol * (1 + np.abs(ref))
        worst = float(np.max(np.abs(mine - ref) / (1 + np.abs(ref))))
        report["outputs"][name] = {"worst": worst, "examples": int(mine.shape[0])}
        ok = ok and bool(np.all(excess <= 0))
    report["ok"] = ok
    print(json.dumps(report))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
