"""Reference outputs of Keras itself for Troupe's layer tests.

save_reference(model, inputs, outdir, name) writes <outdir>/<name>.json holding the model's
architecture (model.to_json()), every layer's weights in Keras's order, the inputs, and
what Keras's own predict() gives for them. tests/core/keras_reference.hpp reads it back,
builds the same model in Troupe, and compares.

Fixture modules (tests/keras/*_fixtures.py) define FIXTURES, a list of functions
fixture(outdir) that build a small model with fixed seeds and call save_reference.
"""

import json
import os

import numpy as np


def _array(a):
    a = np.asarray(a)
    if a.dtype.kind in "US" or a.dtype == object:
        return {"dtype": "string", "shape": list(a.shape),
                "values": [x.decode() if isinstance(x, bytes) else str(x) for x in a.reshape(-1)]}
    if a.dtype.kind in "iub":
        return {"dtype": "int64", "shape": list(a.shape), "values": [int(x) for x in a.reshape(-1)]}
    return {"dtype": "float32", "shape": list(a.shape),
            "values": [float(x) for x in a.astype(np.float64).reshape(-1)]}


def save_reference(model, inputs, outdir, name, training_outputs=None):
    """model: a Functional model whose keras.Input layers are named; inputs: a dict of numpy
    arrays by those names."""
    assert isinstance(inputs, dict), "inputs by the model's input names"
    outputs = model.predict(inputs, verbose=0)
    if not isinstance(outputs, (list, tuple, dict)):
        outputs = [outputs]
    if isinstance(outputs, dict):
        outputs = [outputs[n] for n in model.output_names]
    weights = {}
    for layer in model.layers:
        if layer.weights:
            weights[layer.name] = [_array(w.numpy() if hasattr(w, "numpy") else w)
                                   for w in layer.weights]
    doc = {
        "model": json.loads(model.to_json()),
        "weights": weights,
        "inputs": {k: _array(v) for k, v in inputs.items()},
        "outputs": {n: _array(o) for n, o in zip(model.output_names, outputs)},
    }
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, name + ".json"), "w") as f:
        json.dump(doc, f)
