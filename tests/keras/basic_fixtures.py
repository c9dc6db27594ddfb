"""Keras reference fixtures for Troupe's layer group "basic": Flatten, Reshape, Identity,
Concatenate, the element-wise merges, Dot, Dropout, BatchNormalization, LayerNormalization,
the global 1-D poolings, Rescaling, and Dense/Activation with every activation Troupe has.

Each fixture builds a small Functional model with named inputs and fixed seeds, gives its
layers random non-trivial weights (biases, gamma, beta and the moving statistics away from
their initial zeros and ones), and writes <outdir>/layers/<name>.json through
layer_reference.save_reference: tests/core/test_basic_reference.cpp checks Troupe's outputs
against Keras's. basic_batchnorm_training also writes what one call in training mode gives
(outputs and the updated moving statistics), which predict() cannot show.
"""

import json
import os

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from layer_reference import _array, save_reference  # noqa: E402

ACTIVATIONS = ["linear", "relu", "sigmoid", "tanh", "softmax", "gelu", "silu", "swish",
               "softplus", "elu", "selu", "leaky_relu", "exponential"]


def _rng(n):
    keras.utils.set_random_seed(n)
    return np.random.default_rng(n)


def _randomize(model, rng):
    """Every layer's weights random: kernels and biases normal, gamma in [0.5, 1.5], beta
    normal, moving means normal, moving variances in [0.5, 2]."""
    for layer in model.layers:
        values = []
        for w in layer.weights:
            shape = tuple(w.shape)
            name = w.path.split("/")[-1]
            if name == "gamma":
                values.append(rng.uniform(0.5, 1.5, size=shape))
            elif name == "moving_variance":
                values.append(rng.uniform(0.5, 2.0, size=shape))
            else:
                values.append(rng.normal(scale=0.7, size=shape))
        if values:
            layer.set_weights([v.astype("float32") for v in values])


def _out(outdir):
    return os.path.join(outdir, "layers")


def basic_merges(outdir):
    rng = _rng(11)
    a = keras.Input((4,), name="a")
    b = keras.Input((4,), name="b")
    c = keras.Input((4,), name="c")
    d = keras.Input((2,), name="d")
    e = keras.Input((3, 4), name="e")
    f = keras.Input((3, 1), name="f")
    L = keras.layers
    outputs = [
        L.Multiply(name="multiply_rows")([e, f]),  # broadcast: rows of e weighted by f
        L.Multiply(name="multiply_rows_first")([f, e]),
        L.Add(name="add")([a, b, c]),
        L.Subtract(name="subtract")([a, b]),
        L.Multiply(name="multiply")([a, b, c]),
        L.Average(name="average")([a, b, c]),
        L.Maximum(name="maximum")([a, b, c]),
        L.Minimum(name="minimum")([a, b]),
        L.Concatenate(name="concatenate")([a, d, b]),
        L.Dot(axes=1, name="dot")([a, b]),
        L.Dot(axes=-1, name="dot_last")([L.Dense(4, name="proj")(d), c]),
    ]
    model = keras.Model([a, b, c, d, e, f], outputs, name="basic_merges")
    _randomize(model, rng)
    inputs = {k: rng.normal(size=(5,) + s).astype("float32")
              for k, s in [("a", (4,)), ("b", (4,)), ("c", (4,)), ("d", (2,)), ("e", (3, 4)),
                           ("f", (3, 1))]}
    save_reference(model, inputs, _out(outdir), "basic_merges")


def basic_reshapes(outdir):
    rng = _rng(12)
    x = keras.Input((2, 3, 4), name="x")
    y = keras.Input((1, 3, 4), name="y")
    L = keras.layers
    outputs = [
        L.Dense(3, name="head")(L.Flatten(name="flatten")(x)),
        L.Reshape((4, -1), name="reshape")(x),
        L.Concatenate(axis=1, name="cat_axis1")([x, y]),
        L.Concatenate(axis=-2, name="cat_axis2")([x, x]),
        L.Identity(name="identity")(y),
        L.Rescaling(1.0 / 255, offset=-0.5, name="rescaling")(x),
        L.Rescaling(2.0, name="rescaling_scale")(y),
    ]
    model = keras.Model([x, y], outputs, name="basic_reshapes")
    _randomize(model, rng)
    inputs = {"x": rng.normal(size=(3, 2, 3, 4)).astype("float32"),
              "y": rng.normal(size=(3, 1, 3, 4)).astype("float32")}
    inputs["x"][0] *= 200.0
    save_reference(model, inputs, _out(outdir), "basic_reshapes")


def basic_batchnorm(outdir):
    rng = _rng(13)
    x = keras.Input((5,), name="x")
    s = keras.Input((3, 4), name="s")
    L = keras.layers
    outputs = [
        L.BatchNormalization(name="bn")(L.Dense(4, name="dense")(x)),
        L.BatchNormalization(center=False, epsilon=0.01, name="bn_seq")(s),
        L.BatchNormalization(scale=False, momentum=0.9, axis=2, name="bn_axis2")(s),
    ]
    model = keras.Model([x, s], outputs, name="basic_batchnorm")
    _randomize(model, rng)
    inputs = {"x": rng.normal(size=(6, 5)).astype("float32"),
              "s": rng.normal(loc=1.0, size=(6, 3, 4)).astype("float32")}
    save_reference(model, inputs, _out(outdir), "basic_batchnorm")


def basic_batchnorm_training(outdir):
    """One call with training=True: the outputs use the batch's statistics, and the moving
    statistics move toward them (Keras 3: moving * momentum + batch * (1 - momentum), with
    the biased variance)."""
    rng = _rng(14)
    x = keras.Input((4,), name="x")
    s = keras.Input((2, 3), name="s")
    L = keras.layers
    outputs = [
        L.BatchNormalization(momentum=0.8, name="bn")(x),
        L.BatchNormalization(epsilon=0.1, center=False, name="bn_seq")(s),
    ]
    model = keras.Model([x, s], outputs, name="basic_batchnorm_training")
    _randomize(model, rng)
    inputs = {"x": rng.normal(loc=0.5, size=(7, 4)).astype("float32"),
              "s": rng.normal(scale=2.0, size=(7, 2, 3)).astype("float32")}
    weights = {layer.name: [_array(w.numpy()) for w in layer.weights]
               for layer in model.layers if layer.weights}
    trained = model(inputs, training=True)
    doc = {
        "model": json.loads(model.to_json()),
        "weights": weights,
        "inputs": {k: _array(v) for k, v in inputs.items()},
        "outputs": {n: _array(np.asarray(o)) for n, o in zip(model.output_names, trained)},
        "moving": {layer.name: {"moving_mean": _array(layer.moving_mean.numpy()),
                                "moving_variance": _array(layer.moving_variance.numpy())}
                   for layer in model.layers if isinstance(layer, L.BatchNormalization)},
    }
    os.makedirs(_out(outdir), exist_ok=True)
    with open(os.path.join(_out(outdir), "basic_batchnorm_training.json"), "w") as f:
        json.dump(doc, f)


def basic_layernorm(outdir):
    rng = _rng(15)
    x = keras.Input((3, 6), name="x")
    v = keras.Input((5,), name="v")
    L = keras.layers
    outputs = [
        L.LayerNormalization(name="ln")(x),
        L.LayerNormalization(center=False, epsilon=1e-5, name="ln_scale")(x),
        L.LayerNormalization(scale=False, axis=-1, name="ln_center")(L.Dense(4, name="dense")(v)),
    ]
    model = keras.Model([x, v], outputs, name="basic_layernorm")
    _randomize(model, rng)
    inputs = {"x": rng.normal(loc=2.0, scale=3.0, size=(4, 3, 6)).astype("float32"),
              "v": rng.normal(size=(4, 5)).astype("float32")}
    save_reference(model, inputs, _out(outdir), "basic_layernorm")


def basic_pooling(outdir):
    rng = _rng(16)
    x = keras.Input((5, 3), name="x")
    L = keras.layers
    outputs = [
        L.GlobalAveragePooling1D(name="gap")(x),
        L.GlobalMaxPooling1D(name="gmp")(x),
        L.GlobalAveragePooling1D(keepdims=True, name="gap_keep")(x),
        L.GlobalMaxPooling1D(data_format="channels_first", name="gmp_first")(x),
        L.GlobalAveragePooling1D(data_format="channels_first", keepdims=True,
                                 name="gap_first_keep")(x),
    ]
    model = keras.Model(x, outputs, name="basic_pooling")
    inputs = {"x": rng.normal(size=(4, 5, 3)).astype("float32")}
    save_reference(model, inputs, _out(outdir), "basic_pooling")


def basic_activations(outdir):
    rng = _rng(17)
    x = keras.Input((6,), name="x")
    L = keras.layers
    outputs = []
    for act in ACTIVATIONS:
        outputs.append(L.Dense(5, activation=act, name="dense_" + act)(x))
        outputs.append(L.Activation(act, name="act_" + act)(x))
    outputs.append(L.ReLU(name="relu_layer")(x))
    outputs.append(L.LeakyReLU(name="leaky_relu_layer")(x))
    outputs.append(L.LeakyReLU(negative_slope=0.05, name="leaky_relu_005")(x))
    model = keras.Model(x, outputs, name="basic_activations")
    _randomize(model, rng)
    inputs = {"x": rng.normal(scale=2.5, size=(8, 6)).astype("float32")}
    save_reference(model, inputs, _out(outdir), "basic_activations")


def basic_dropout(outdir):
    """Dropout in inference: the identity (predict never drops)."""
    rng = _rng(18)
    x = keras.Input((6,), name="x")
    L = keras.layers
    h = L.Dropout(0.5, seed=3, name="dropout")(L.Dense(4, name="dense")(x))
    model = keras.Model(x, [L.Dense(2, name="head")(h)], name="basic_dropout")
    _randomize(model, rng)
    inputs = {"x": rng.normal(size=(4, 6)).astype("float32")}
    save_reference(model, inputs, _out(outdir), "basic_dropout")


FIXTURES = [basic_merges, basic_reshapes, basic_batchnorm, basic_batchnorm_training,
            basic_layernorm, basic_pooling, basic_activations, basic_dropout]


if __name__ == "__main__":
    import sys

    out = sys.argv[1] if len(sys.argv) > 1 else "."
    for fixture in FIXTURES:
        fixture(out)
    print(json.dumps({"program": "basic_fixtures", "ok": True, "outdir": out,
                      "fixtures": [f.__name__ for f in FIXTURES]}))
