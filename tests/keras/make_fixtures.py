#!/usr/bin/env python3
"""Saves small Keras models, made by real Keras with fixed seeds, for the C++ tests.

For each fixture NAME: NAME.keras (model.save) and NAME.expected.json: a few input examples
and Keras's own predict() outputs for them, as flat lists of float with their shapes:

    {"model": "NAME.keras", "keras_version": "3.15.1", "backend": "jax",
     "inputs":  [{"name": "a", "shape": [4, 3], "dtype": "float32", "values": [...]}],
     "outputs": [{"name": "click", "shape": [4, 1], "values": [...]}]}

Inputs and outputs are in the model's order (model.inputs, model.outputs), named after the
Input and the layer that makes each. Some fixtures
also write model.to_json() texts (NAME.json).

To add a fixture: write a function taking the output directory, decorated with @fixture;
build the model after seed(), save it with save_model(). Run in the environment that
scripts/keras-venv.sh makes:

    build/keras-venv/bin/python tests/keras/make_fixtures.py OUTDIR [FIXTURE...]
"""

import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")  # no probing for GPUs and TPUs

import keras  # noqa: E402
import numpy as np  # noqa: E402

FIXTURES = []


def fixture(fn):
    """Registers a function fn(outdir) that writes one or more fixtures."""
    FIXTURES.append(fn)
    return fn


def seed(n):
    """Seeds Keras (initializers, dropout) and returns a numpy generator for inputs."""
    keras.utils.set_random_seed(n)
    return np.random.default_rng(n)


def _tensor(name, array):
    array = np.asarray(array)
    return {
        "name": name,
        "shape": list(array.shape),
        "dtype": str(array.dtype),
        "values": [float(v) if array.dtype.kind == "f" else int(v) for v in array.reshape(-1)],
    }


def _layer_of(keras_tensor):
    """The name of the layer that made a symbolic tensor (an output's name)."""
    return keras_tensor._keras_history.operation.name


def save_model(outdir, name, model, inputs):
    """Saves NAME.keras and NAME.expected.json: `inputs` (one array per model input, in
    model.inputs order) and what model.predict gives for them."""
    model.save(os.path.join(outdir, name + ".keras"))
    outputs = model.predict(inputs if len(inputs) > 1 else inputs[0], verbose=0)
    if not isinstance(outputs, (list, tuple)):
        outputs = [outputs]
    expected = {
        "model": name + ".keras",
        "keras_version": keras.__version__,
        "backend": keras.backend.backend(),
        "inputs": [_tensor(t.name, x) for t, x in zip(model.inputs, inputs)],
        "outputs": [_tensor(_layer_of(t), y) for t, y in zip(model.outputs, outputs)],
    }
    write_json(outdir, name + ".expected.json", expected)


def write_json(outdir, filename, value):
    with open(os.path.join(outdir, filename), "w") as f:
        json.dump(value, f, indent=1)
        f.write("\n")


@fixture
def mlp(outdir):
    """A Sequential MLP: Dense(8, relu), Dropout (no variables), Dense(3, softmax)."""
    rng = seed(1)
    model = keras.Sequential(
        [
            keras.Input((4,), name="features"),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dropout(0.25),
            keras.layers.Dense(3, activation="softmax"),
        ],
        name="mlp",
    )
    x = rng.normal(size=(5, 4)).astype("float32")
    save_model(outdir, "mlp", model, [x])


def _two_tower():
    a = keras.Input((3,), name="a")
    b = keras.Input((5,), name="b")
    shared = keras.layers.Dense(4, activation="tanh", name="shared")
    ta = shared(keras.layers.Dense(6, name="proj_a")(a))
    tb = shared(keras.layers.Dense(6, name="proj_b")(b))
    joined = keras.layers.Concatenate(name="joined")([ta, tb])
    click = keras.layers.Dense(1, activation="sigmoid", name="click")(joined)
    value = keras.layers.Dense(2, name="value")(joined)
    model = keras.Model([a, b], [click, value], name="two_tower")
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=0.01),
        loss={"click": "binary_crossentropy", "value": "mse"},
    )
    return model


@fixture
def two_tower(outdir):
    """Two inputs, a Dense layer shared by both towers, Concatenate, two outputs; compiled
    with Adam and a loss per output. Saved before fit (two_tower: no optimizer variables)
    and after 3 steps of fit (two_tower_fitted); its to_json() as two_tower.json."""
    rng = seed(2)
    model = _two_tower()
    x = [rng.normal(size=(4, 3)).astype("float32"), rng.normal(size=(4, 5)).astype("float32")]
    save_model(outdir, "two_tower", model, x)
    with open(os.path.join(outdir, "two_tower.json"), "w") as f:
        f.write(model.to_json())

    n = 24
    train_x = [rng.normal(size=(n, 3)).astype("float32"), rng.normal(size=(n, 5)).astype("float32")]
    train_y = {
        "click": (rng.random(size=(n, 1)) < 0.5).astype("float32"),
        "value": rng.normal(size=(n, 2)).astype("float32"),
    }
    model.fit(train_x, train_y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    save_model(outdir, "two_tower_fitted", model, x)


@fixture
def batchnorm_half(outdir):
    """Dense in float16 (its variables stored as float16), then BatchNormalization: gamma and
    beta (trainable), moving mean and variance (not), after 2 steps of SGD so that none of
    them holds its initial value."""
    rng = seed(3)
    model = keras.Sequential(
        [
            keras.Input((4,), name="features"),
            keras.layers.Dense(3, dtype="float16", name="half"),
            keras.layers.BatchNormalization(name="norm"),
        ],
        name="batchnorm_half",
    )
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1), loss="mse")
    train_x = rng.normal(size=(16, 4)).astype("float32")
    model.fit(train_x, rng.normal(size=(16, 3)).astype("float32"), batch_size=8, verbose=0)
    x = rng.normal(size=(3, 4)).astype("float32")
    save_model(outdir, "batchnorm_half", model, [x])


@fixture
def keras2_json(outdir):
    """model.to_json() as tf_keras 2 / Keras 2 wrote it (written here by hand: tf_keras is
    not installed): layers with inbound_nodes as lists of [layer, node, tensor, kwargs],
    input_layers/output_layers, keras_version 2.x and backend."""

    def dense(name, units, activation, inbound):
        return {
            "class_name": "Dense",
            "config": {
                "name": name, "trainable": True, "dtype": "float32", "units": units,
                "activation": activation, "use_bias": True,
                "kernel_initializer": {"class_name": "GlorotUniform", "config": {"seed": None}},
                "bias_initializer": {"class_name": "Zeros", "config": {}},
                "kernel_regularizer": None, "bias_regularizer": None,
                "activity_regularizer": None, "kernel_constraint": None, "bias_constraint": None,
            },
            "name": name,
            "inbound_nodes": [[[src, 0, 0, {}] for src in inbound]],
        }

    def input_layer(name, dim):
        return {
            "class_name": "InputLayer",
            "config": {"batch_input_shape": [None, dim], "dtype": "float32", "sparse": False,
                       "ragged": False, "name": name},
            "name": name,
            "inbound_nodes": [],
        }

    model = {
        "class_name": "Functional",
        "config": {
            "name": "model",
            "trainable": True,
            "layers": [
                input_layer("a", 3),
                input_layer("b", 5),
                dense("proj_a", 6, "linear", ["a"]),
                dense("proj_b", 6, "linear", ["b"]),
                {
                    "class_name": "Concatenate",
                    "config": {"name": "joined", "trainable": True, "dtype": "float32", "axis": -1},
                    "name": "joined",
                    "inbound_nodes": [[["proj_a", 0, 0, {}], ["proj_b", 0, 0, {}]]],
                },
                dense("click", 1, "sigmoid", ["joined"]),
            ],
            "input_layers": [["a", 0, 0], ["b", 0, 0]],
            "output_layers": [["click", 0, 0]],
        },
        "keras_version": "2.15.0",
        "backend": "tensorflow",
    }
    with open(os.path.join(outdir, "keras2_functional.json"), "w") as f:
        json.dump(model, f)


def _layer_modules():
    """The fixture modules of the layer groups (tests/keras/*_fixtures.py): each defines
    FIXTURES, functions fixture(outdir) that write outdir/layers/<name>.json."""
    import glob
    import importlib
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    for path in sorted(glob.glob(os.path.join(here, "*_fixtures.py"))):
        module = importlib.import_module(os.path.basename(path)[:-3])
        FIXTURES.extend(module.FIXTURES)


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    _layer_modules()
    outdir = argv[1]
    wanted = set(argv[2:])
    unknown = wanted - {f.__name__ for f in FIXTURES}
    if unknown:
        print(f"make_fixtures: no fixture {sorted(unknown)}", file=sys.stderr)
        return 2
    os.makedirs(outdir, exist_ok=True)
    made = []
    for f in FIXTURES:
        if not wanted or f.__name__ in wanted:
            keras.backend.clear_session()  # layer names numbered afresh in each fixture
            f(outdir)
            made.append(f.__name__)
    print(json.dumps({"program": "make_fixtures", "ok": True, "outdir": outdir, "fixtures": made}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
