#!/usr/bin/env python3
"""What real Keras makes of a .keras file that Troupe wrote (run by tests/keras).

    check_roundtrip.py predict MODEL.keras EXPECTED.json
        keras.saving.load_model(MODEL), then predict() on EXPECTED's inputs; passes when
        every output is within 1e-5 of EXPECTED's (make_fixtures.py's format).
    check_roundtrip.py weights MODEL.keras OUT.json
        load_model(MODEL), then writes every variable Keras loaded, as
        {"layers": {layer name: [{"shape": [...], "values": [...]}, ...]},
         "optimizer": {"name": ..., "iterations": n, "variables": [{"shape", "values"}]}}
        with each layer's variables in Keras's saving order (trainable, then non-trainable).

Ends with one JSON line; exits 0 when it passes, 1 when it does not.
"""

import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import keras  # noqa: E402
import numpy as np  # noqa: E402


def _values(v):
    a = np.asarray(v)
    return {"shape": list(a.shape), "values": [float(x) for x in a.reshape(-1)]}


def predict(model_path, expected_path):
    with open(expected_path) as f:
        expected = json.load(f)
    model = keras.saving.load_model(model_path)
    inputs = [
        np.asarray(t["values"], dtype=t["dtype"]).reshape(t["shape"]) for t in expected["inputs"]
    ]
    outputs = model.predict(inputs if len(inputs) > 1 else inputs[0], verbose=0)
    if not isinstance(outputs, (list, tuple)):
        outputs = [outputs]
    worst = 0.0
    for got, want in zip(outputs, expected["outputs"]):
        got = np.asarray(got)
        if list(got.shape) != want["shape"]:
            shape = list(got.shape)
            error = f"output {want['name']}: shape {shape}, not {want['shape']}"
            return {"ok": False, "error": error}
        worst = max(worst, float(np.max(np.abs(got.reshape(-1) - np.asarray(want["values"])))))
    ok = len(outputs) == len(expected["outputs"]) and worst <= 1e-5
    return {"ok": ok, "outputs": len(outputs), "max_abs_diff": worst}


def weights(model_path, out_path):
    model = keras.saving.load_model(model_path)
    layers = {}
    for layer in model._flatten_layers(include_self=False):
        variables = layer.trainable_weights + layer.non_trainable_weights
        layers[layer.name] = [_values(v) for v in variables]
    result = {"layers": layers}
    opt = getattr(model, "optimizer", None)
    if opt is not None:
        result["optimizer"] = {
            "name": opt.name,
            "iterations": int(np.asarray(opt.iterations)),
            "variables": [_values(v) for v in opt.variables],
        }
    with open(out_path, "w") as f:
        json.dump(result, f)
    return {"ok": True, "layers": len(layers)}


def main(argv):
    if len(argv) != 4 or argv[1] not in ("predict", "weights"):
        print(__doc__, file=sys.stderr)
        return 2
    result = (predict if argv[1] == "predict" else weights)(argv[2], argv[3])
    print(json.dumps({"program": "check_roundtrip", "mode": argv[1], **result}))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
