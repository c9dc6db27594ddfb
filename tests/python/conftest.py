"""Fixtures of the Python package's tests: small Keras 3 models (JAX backend) built and
saved by Keras itself, the reference Troupe's results are compared with, and synthetic data
whose labels follow from the features (so training must lower the loss)."""

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# tests/keras/tfrecord.py writes TFRecord files without TensorFlow.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "keras"))

import numpy as np  # noqa: E402
import pytest  # noqa: E402


def ctr_keras_model(compile=True):
    """Two inputs (4 dense features, one id of 50) -> Embedding(8) + Dense -> a click
    probability: the shape of the parameter-server tutorial's model."""
    import keras

    dense = keras.Input(shape=(4,), name="dense")
    item = keras.Input(shape=(), dtype="int64", name="item")
    emb = keras.layers.Embedding(50, 8, name="item_emb")(item)
    h = keras.layers.Concatenate(name="concat")([dense, emb])
    h = keras.layers.Dense(16, activation="relu", name="hidden")(h)
    out = keras.layers.Dense(1, activation="sigmoid", name="click")(h)
    model = keras.Model({"dense": dense, "item": item}, out, name="ctr")
    if compile:
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="binary_crossentropy",
                      metrics=["auc"])
    return model


def ctr_data(n, seed):
    """Labels a fixed function of the features: a model can learn them."""
    rng = np.random.default_rng(seed)
    dense = rng.normal(size=(n, 4)).astype(np.float32)
    item = rng.integers(0, 50, size=n).astype(np.int64)
    score = dense[:, 0] - 0.5 * dense[:, 1] + np.where(item % 2 == 0, 1.0, -1.0)
    label = (score > 0).astype(np.float32)
    return {"dense": dense, "item": item}, label


@pytest.fixture(scope="session")
def ctr_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "ctr.keras"
    ctr_keras_model().save(path)
    return str(path)
