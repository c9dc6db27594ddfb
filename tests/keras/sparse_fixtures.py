"""Keras reference fixtures for Troupe's layer group "sparse": Conv2D, MaxPooling2D,
AveragePooling2D, GlobalAveragePooling2D, Embedding, Hashing, StringLookup, IntegerLookup,
Cross (TensorFlow Recommenders' DCN-v2 cross layer) and FactorizationMachine (Troupe's).

Models of float and integer inputs are written by layer_reference.save_reference
(tests/core/test_sparse_reference.cpp checks them with check_against_keras). Hashing and the
lookups need TensorFlow (Keras 3 runs them through tf.strings and tf.lookup), and Keras on
JAX cannot run a model whose inputs are strings; their fixtures are written here instead,
each layer run eagerly on its own:
  - sparse_host_<name>.json: {"layer": {"class_name", "config"}, "input", "output"} for one
    layer (its int64 output exactly), and "assets" (name -> text) where the vocabulary is a
    file of a .keras archive;
  - sparse_lookup_model.json: a model of string and integer inputs (Hashing, the lookups,
    Embeddings after them) in save_reference's format, its outputs computed layer by layer.
Those are made only where TensorFlow is installed (HOST_FIXTURES below); elsewhere they are
skipped with a note on stderr.

This module also holds the Keras 3 definitions of the two layers Keras itself lacks:
Cross, with TFRS's arguments, variables and registration name ("Custom>Cross"), and
FactorizationMachine ("troupe>FactorizationMachine").
"""

import importlib.util
import json
import os
import sys
import zipfile

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402

from layer_reference import _array, save_reference  # noqa: E402


# ---- Layers Keras lacks --------------------------------------------------------------------

@keras.saving.register_keras_serializable(package="Custom", name="Cross")
class Cross(keras.layers.Layer):
    """DCN-v2's cross layer as tfrs.layers.dcn.Cross computes it, for Keras 3:
    y = x0 * (x W + b + diag_scale * x) + x, called as cross(x0, x) or cross(x0) (x = x0),
    W full rank [d, d] or low rank U [d, p] V [p, d] (projection_dim p). Its arguments and
    get_config are TFRS's; its variables, in TFRS's order (the kernels and bias of its Dense
    sublayers _dense, or _dense_u and _dense_v), are its own: dense_kernel, dense_bias, or
    dense_u_kernel, dense_v_kernel, dense_v_bias. TFRS registers the class with
    tf.keras.utils.register_keras_serializable() (package "Custom"): so does this one."""

    def __init__(self, projection_dim=None, diag_scale=0.0, use_bias=True, preactivation=None,
                 kernel_initializer="truncated_normal", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, **kwargs):
        super().__init__(**kwargs)
        if diag_scale is not None and diag_scale < 0:
            raise ValueError(f"`diag_scale` should be non-negative, got {diag_scale}")
        self.projection_dim = projection_dim
        self.diag_scale = diag_scale
        self.use_bias = use_bias
        self.preactivation = keras.activations.get(preactivation)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)

    def build(self, x0_shape, x_shape=None):
        d = x0_shape[-1]

        def kernel(name, shape):
            return self.add_weight(name=name, shape=shape, initializer=self.kernel_initializer,
                                   regularizer=self.kernel_regularizer)

        if self.projection_dim is None:
            self.dense_kernel = kernel("dense_kernel", (d, d))
        else:
            self.dense_u_kernel = kernel("dense_u_kernel", (d, self.projection_dim))
            self.dense_v_kernel = kernel("dense_v_kernel", (self.projection_dim, d))
        if self.use_bias:
            self.bias = self.add_weight(
                name="dense_bias" if self.projection_dim is None else "dense_v_bias",
                shape=(d,), initializer=self.bias_initializer, regularizer=self.bias_regularizer)

    def call(self, x0, x=None):
        if x is None:
            x = x0
        if self.projection_dim is None:
            p = ops.matmul(x, self.dense_kernel)
        else:
            p = ops.matmul(ops.matmul(x, self.dense_u_kernel), self.dense_v_kernel)
        if self.use_bias:
            p = p + self.bias
        p = self.preactivation(p)
        if self.diag_scale:
            p = p + self.diag_scale * x
        return x0 * p + x

    def compute_output_shape(self, x0_shape, x_shape=None):
        return x0_shape

    def get_config(self):
        config = super().get_config()
        config.update({
            "projection_dim": self.projection_dim,
            "diag_scale": self.diag_scale,
            "use_bias": self.use_bias,
            "preactivation": keras.activations.serialize(self.preactivation),
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
            "bias_regularizer": keras.regularizers.serialize(self.bias_regularizer),
        })
        return config


@keras.saving.register_keras_serializable(package="troupe", name="FactorizationMachine")
class FactorizationMachine(keras.layers.Layer):
    """The pairwise term of a factorization machine over F field embeddings of width k:
    [batch, F, k] -> [batch, 1], 1/2 sum_k ((sum_f x)^2 - sum_f x^2). No weights."""

    def call(self, x):
        total = ops.sum(x, axis=1)
        return 0.5 * ops.sum(ops.square(total) - ops.sum(ops.square(x), axis=1), axis=-1,
                             keepdims=True)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], 1)


# ---- Helpers -------------------------------------------------------------------------------

def _rng(n):
    keras.utils.set_random_seed(n)
    return np.random.default_rng(n)


def _randomize(model, rng):
    """Every weight normal (scale 0.5), so no bias or kernel keeps its initial value."""
    for layer in model.layers:
        if layer.weights:
            layer.set_weights([rng.normal(scale=0.5, size=tuple(w.shape)).astype("float32")
                               for w in layer.weights])


def _out(outdir):
    return os.path.join(outdir, "layers")


def _have_tensorflow():
    return importlib.util.find_spec("tensorflow") is not None


def _int64(fn):
    """fn()'s int64 result. Keras hands a TensorFlow layer's result to its backend: JAX, with
    64-bit types off (its default), wraps int64 bins to int32; here they stay whole."""
    if keras.backend.backend() != "jax":
        return np.asarray(fn())
    import jax
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        return np.asarray(fn())
    finally:
        jax.config.update("jax_enable_x64", before)


def _host_layer(layer, x, outdir, name, assets=None):
    """Writes layers/sparse_host_<name>.json: the layer's config, an input and its output."""
    y = _int64(lambda: layer(x))
    assert y.dtype == np.int64, y.dtype
    doc = {
        "layer": {"class_name": type(layer).__name__, "config": layer.get_config()},
        "input": _array(x),
        "output": _array(y.astype("int64")),
    }
    if assets:
        doc["assets"] = assets
    os.makedirs(_out(outdir), exist_ok=True)
    with open(os.path.join(_out(outdir), f"sparse_host_{name}.json"), "w") as f:
        json.dump(doc, f)


# ---- Fixtures of float and integer inputs --------------------------------------------------

def sparse_conv(outdir):
    """Conv2D: "same" with stride 2 (even and uneven padding), a 4x3 kernel with "same" at
    stride 1 (padding 1 + 2 rows, 1 + 1 columns), dilation, strides (1, 2), no bias, fused
    activations."""
    rng = _rng(21)
    L = keras.layers
    x = keras.Input((9, 8, 3), name="image")
    outputs = [
        L.Conv2D(4, 3, strides=2, padding="same", activation="relu", name="same_s2")(x),
        L.Conv2D(2, (4, 3), padding="same", name="same_uneven")(x),
        L.Conv2D(3, (3, 2), dilation_rate=2, activation="tanh", use_bias=False,
                 name="dilated")(x),
        L.Conv2D(2, 2, strides=(1, 2), activation="sigmoid", name="strided")(x),
    ]
    model = keras.Model(x, outputs, name="sparse_conv")
    _randomize(model, rng)
    inputs = {"image": rng.normal(size=(2, 9, 8, 3)).astype("float32")}
    save_reference(model, inputs, _out(outdir), "sparse_conv")


def sparse_pooling(outdir):
    """Max and average pooling, valid and same (means exclude the padding), default and
    explicit strides; global average pooling with and without keepdims; a Conv2D in front."""
    rng = _rng(22)
    L = keras.layers
    x = keras.Input((7, 6, 2), name="image")
    c = L.Conv2D(3, 2, padding="same", name="conv")(x)
    outputs = [
        L.MaxPooling2D(2, padding="same", name="max_same")(x),
        L.MaxPooling2D(3, strides=1, name="max_valid_s1")(c),
        L.AveragePooling2D(2, padding="same", name="avg_same")(x),
        L.AveragePooling2D((3, 2), strides=(2, 1), padding="same", name="avg_same_s21")(c),
        L.AveragePooling2D((2, 3), name="avg_valid")(c),
        L.GlobalAveragePooling2D(name="gap")(c),
        L.GlobalAveragePooling2D(keepdims=True, name="gap_keep")(x),
    ]
    model = keras.Model(x, outputs, name="sparse_pooling")
    _randomize(model, rng)
    inputs = {"image": rng.normal(size=(3, 7, 6, 2)).astype("float32")}
    save_reference(model, inputs, _out(outdir), "sparse_pooling")


def sparse_embedding_fm(outdir):
    """Embedding of ids [batch] and [batch, n]; DeepFM's parts: field embeddings into
    FactorizationMachine, next to a Dense on an embedding."""
    rng = _rng(23)
    L = keras.layers
    fields = keras.Input((4,), dtype="int32", name="fields")
    one = keras.Input((), dtype="int32", name="one")
    e = L.Embedding(10, 3, name="field_embedding")(fields)
    outputs = [
        e,
        FactorizationMachine(name="fm")(e),
        L.Dense(2, name="over_one")(L.Embedding(7, 5, name="one_embedding")(one)),
    ]
    model = keras.Model([fields, one], outputs, name="sparse_embedding_fm")
    _randomize(model, rng)
    inputs = {"fields": rng.integers(0, 10, size=(5, 4)), "one": rng.integers(0, 7, size=(5,))}
    save_reference(model, inputs, _out(outdir), "sparse_embedding_fm")


def sparse_cross(outdir):
    """DCN-v2: a full-rank Cross on x0 alone (diag_scale), a low-rank one on [x0, x1], one
    without bias; explicit initializers (TFRS's default, truncated_normal, is not one Troupe
    makes)."""
    rng = _rng(24)
    x = keras.Input((6,), name="features")
    x0 = keras.layers.Dense(6, name="x0")(x)
    init = {"kernel_initializer": "glorot_uniform"}
    x1 = Cross(diag_scale=0.5, name="cross_full", **init)(x0)
    x2 = Cross(projection_dim=2, name="cross_low", **init)(x0, x1)
    x3 = Cross(use_bias=False, name="cross_nobias", **init)(x0, x2)
    model = keras.Model(x, [x1, x2, x3], name="sparse_cross")
    _randomize(model, rng)
    inputs = {"features": rng.normal(size=(4, 6)).astype("float32")}
    save_reference(model, inputs, _out(outdir), "sparse_cross")


# ---- Fixtures that need TensorFlow ---------------------------------------------------------

def _words(rng, n):
    """n strings of every FarmHash length class (0 to 130 bytes), some repeated."""
    alphabet = np.array(list("abcdefghijklmnopqrstuvwxyz0123456789 -_"))
    lengths = [0, 1, 2, 3, 4, 7, 8, 9, 16, 17, 31, 32, 33, 50, 64, 65, 100, 130]
    out = []
    for i in range(n):
        length = lengths[i % len(lengths)] if i < len(lengths) else int(rng.integers(0, 80))
        out.append("".join(rng.choice(alphabet, size=length)))
    return out


def sparse_hashing(outdir):
    """Hashing of strings and of integers (hashed as decimal text), with huge num_bins (the
    hash's upper bits), a mask value, and salts (SipHash)."""
    rng = _rng(25)
    words = np.array(_words(rng, 40)).reshape(20, 2)
    ints = np.concatenate([rng.integers(-10**12, 10**12, size=36),
                           [0, -1, 2**62, -2**63]]).reshape(20, 2).astype("int64")
    H = keras.layers.Hashing
    _host_layer(H(num_bins=2**62 + 7), words, outdir, "hash_strings")
    _host_layer(H(num_bins=2**62 + 7), ints, outdir, "hash_ints")
    _host_layer(H(num_bins=13, mask_value=""), words, outdir, "hash_mask")
    _host_layer(H(num_bins=13, mask_value=0), ints, outdir, "hash_int_mask")
    _host_layer(H(num_bins=2**62 + 7, salt=[2**40 + 3, 977]), words, outdir, "hash_salted")
    _host_layer(H(num_bins=1000, salt=133), ints, outdir, "hash_int_salted")


def sparse_lookups(outdir):
    """StringLookup and IntegerLookup with inline vocabularies: the mask, several OOV indices
    (Fingerprint64, SipHash with a salt, floor modulo, "farmhash"), the oov token; and a
    StringLookup whose vocabulary is a file in a .keras archive's assets."""
    rng = _rng(26)
    vocab = ["red", "green", "blue", "cyan", "magenta"]
    words = np.array(rng.choice(vocab + ["", "teal", "olive", "gold", "x" * 40], size=(12, 3)))
    S = keras.layers.StringLookup
    _host_layer(S(vocabulary=vocab), words, outdir, "string_lookup")
    _host_layer(S(vocabulary=vocab, mask_token="", num_oov_indices=3), words, outdir,
                "string_lookup_mask_oov3")
    _host_layer(S(vocabulary=vocab, num_oov_indices=4, salt=[7, 11]), words, outdir,
                "string_lookup_salted")
    ids = rng.choice([3, 5, 8, 13, 21, 0, -4, 99, 1000, -77], size=(12, 3)).astype("int64")
    I = keras.layers.IntegerLookup
    _host_layer(I(vocabulary=[3, 5, 8, 13, 21]), ids, outdir, "integer_lookup")
    _host_layer(I(vocabulary=[3, 5, 8, 13, 21], mask_token=0, num_oov_indices=3), ids, outdir,
                "integer_lookup_mask_floormod")
    _host_layer(I(vocabulary=[3, 5, 8, 13, 21], num_oov_indices=3, oov_method="farmhash"), ids,
                outdir, "integer_lookup_farmhash")

    # A vocabulary file, saved into a .keras archive's assets (the config says null).
    path = os.path.join(_out(outdir), "sparse_vocabulary.txt")
    os.makedirs(_out(outdir), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(vocab) + "\n")
    lookup = S(vocabulary=path, mask_token="", name="from_file")
    inp = keras.Input((3,), dtype="string", name="colour")
    model = keras.Model(inp, lookup(inp))
    archive = os.path.join(_out(outdir), "sparse_lookup_file.keras")
    model.save(archive)
    with zipfile.ZipFile(archive) as z:
        assets = {n: z.read(n).decode() for n in z.namelist() if n.startswith("assets/")}
    _host_layer(lookup, words, outdir, "string_lookup_file", assets=assets)


def sparse_lookup_model(outdir):
    """A model of string and integer inputs: Hashing, StringLookup and IntegerLookup, each
    into an Embedding (save_reference's format; outputs computed layer by layer, as Keras on
    JAX cannot run a model of string inputs)."""
    rng = _rng(27)
    L = keras.layers
    colour = keras.Input((2,), dtype="string", name="colour")
    item = keras.Input((3,), dtype="int64", name="item")
    hashing = L.Hashing(num_bins=11, name="hashed")
    slookup = L.StringLookup(vocabulary=["red", "green", "blue"], mask_token="", name="colours")
    ilookup = L.IntegerLookup(vocabulary=[10, 20, 30, 40], num_oov_indices=2, name="items")
    e1 = L.Embedding(11, 3, name="hash_embedding")
    e2 = L.Embedding(5, 2, name="colour_embedding")
    e3 = L.Embedding(7, 4, name="item_embedding")
    outputs = [e1(hashing(colour)), e2(slookup(colour)), e3(ilookup(item))]
    model = keras.Model([colour, item], outputs, name="sparse_lookup_model")
    _randomize(model, rng)
    inputs = {
        "colour": np.array(rng.choice(["red", "green", "blue", "", "pink"], size=(6, 2))),
        "item": rng.choice([10, 20, 30, 40, 7, -8, 55], size=(6, 3)).astype("int64"),
    }
    values = [np.asarray(e1(hashing(inputs["colour"]))),
              np.asarray(e2(slookup(inputs["colour"]))),
              np.asarray(e3(ilookup(inputs["item"])))]
    doc = {
        "model": json.loads(model.to_json()),
        "weights": {layer.name: [_array(np.asarray(w)) for w in layer.weights]
                    for layer in model.layers if layer.weights},
        "inputs": {k: _array(v) for k, v in inputs.items()},
        "outputs": {n: _array(v) for n, v in zip(model.output_names, values)},
    }
    os.makedirs(_out(outdir), exist_ok=True)
    with open(os.path.join(_out(outdir), "sparse_lookup_model.json"), "w") as f:
        json.dump(doc, f)


HOST_FIXTURES = [sparse_hashing, sparse_lookups, sparse_lookup_model]


def _needs_tensorflow(fn):
    def run(outdir):
        if not _have_tensorflow():
            print(f"sparse_fixtures: {fn.__name__} skipped: Keras's Hashing, StringLookup and "
                  "IntegerLookup need TensorFlow (pip install tensorflow-cpu)", file=sys.stderr)
            return
        fn(outdir)
    run.__name__ = fn.__name__
    return run


FIXTURES = [sparse_conv, sparse_pooling, sparse_embedding_fm, sparse_cross] + [
    _needs_tensorflow(f) for f in HOST_FIXTURES]
