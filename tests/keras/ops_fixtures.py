"""Keras reference fixtures for Troupe's operations (keras.ops called on symbolic tensors of
a Functional model, which Keras records as operation nodes of its config): arithmetic with
tensors and constants under broadcasting, element-wise functions, reductions, shapes,
joins and splits, indexing, matmul and einsum, casts and one_hot.

Each fixture builds a Functional model whose outputs are the operations' results (a Dense
in front where a gradient should reach a weight), and writes <outdir>/layers/<name>.json
through layer_reference.save_reference: tests/core/test_ops.cpp checks Troupe's outputs
against Keras's and the gradients of every operation against finite differences.
"""

import os

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402

from layer_reference import save_reference  # noqa: E402

L = keras.layers


def _rng(n):
    keras.utils.set_random_seed(n)
    return np.random.default_rng(n)


def _out(outdir):
    return os.path.join(outdir, "layers")


def _model(inputs, outputs, name):
    return keras.Model(inputs, outputs, name=name)


def ops_arith(outdir):
    rng = _rng(21)
    a = keras.Input((3, 4), name="a")
    b = keras.Input((1, 4), name="b")
    c = keras.Input((4,), name="c")
    p = keras.Input((3, 4), name="p")  # positive: divisors, bases, logs
    outs = [
        ops.add(a, b),
        ops.subtract(a, ops.expand_dims(c, 1)),
        ops.multiply(b, ops.expand_dims(c, 1)),
        ops.divide(a, p),
        ops.true_divide(c, 3.0),
        a / 2,
        2.0 - a,
        ops.power(p, 2.0),
        ops.power(p, a),
        p ** 0.5,
        ops.maximum(a, 0.25),
        ops.minimum(a, b),
        -a,
        a + np.array([1.0, -2.0, 3.0, 0.5], dtype="float32"),
        a * np.array([[0.5], [2.0], [-1.0]], dtype="float32"),
        a + ops.convert_to_tensor(np.full((4,), 0.75, dtype="float32")),
        ops.where(a > 0, a, b * 2.0),
        ops.where(ops.logical_and(a > -0.5, a < 0.5), a, 0.0),
        ops.cast(ops.greater_equal(a, b), "float32"),
        ops.cast(ops.logical_or(ops.less(a, 0.0), ops.equal(b, b)), "float32"),
        ops.cast(ops.not_equal(a, ops.expand_dims(c, 1)), "float32"),
        ops.cast(ops.less_equal(a, 0.1), "float32"),
        ops.cast(ops.logical_xor(a > 0, b > 0), "float32"),
        ops.clip(a, -0.5, 0.5),
    ]
    model = _model([a, b, c, p], outs, "ops_arith")
    inputs = {"a": rng.normal(size=(3, 3, 4)).astype("float32"),
              "b": rng.normal(size=(3, 1, 4)).astype("float32"),
              "c": rng.normal(size=(3, 4)).astype("float32"),
              "p": rng.uniform(0.5, 2.0, size=(3, 3, 4)).astype("float32")}
    save_reference(model, inputs, _out(outdir), "ops_arith")


def ops_maps(outdir):
    rng = _rng(22)
    x = keras.Input((3, 5), name="x")
    p = keras.Input((3, 5), name="p")
    outs = [
        ops.negative(x), ops.exp(x), ops.log(p), ops.log1p(p), ops.sqrt(p), ops.square(x),
        ops.abs(x), ops.sign(x), ops.tanh(x), ops.sigmoid(x), ops.relu(x), ops.erf(x),
        ops.log_sigmoid(x), ops.softplus(x), ops.silu(x), ops.gelu(x),
        ops.gelu(x, approximate=False), ops.softmax(x), ops.softmax(x, axis=1),
        ops.log_softmax(x), ops.log_softmax(x, axis=1), ops.reciprocal(p),
        ops.cast(ops.logical_not(x > 0), "float32"), ops.selu(x), ops.elu(x),
        ops.leaky_relu(x),
    ]
    model = _model([x, p], outs, "ops_maps")
    inputs = {"x": rng.normal(size=(2, 3, 5)).astype("float32"),
              "p": rng.uniform(0.3, 2.0, size=(2, 3, 5)).astype("float32")}
    save_reference(model, inputs, _out(outdir), "ops_maps")


def ops_reduce(outdir):
    rng = _rng(23)
    x = keras.Input((3, 4, 2), name="x")
    outs = [
        ops.sum(x, axis=1), ops.sum(x, axis=[1, 3], keepdims=True), ops.mean(x, axis=-1),
        ops.mean(x, axis=(1, 2)), ops.max(x, axis=2), ops.min(x, axis=-1, keepdims=True),
        ops.prod(x, axis=3), ops.prod(x, axis=(1, 3)), ops.argmax(x, axis=1),
        ops.argmin(x, axis=-1), ops.argmax(x, axis=2, keepdims=True),
    ]
    model = _model([x], outs, "ops_reduce")
    inputs = {"x": rng.normal(size=(3, 3, 4, 2)).astype("float32")}
    save_reference(model, inputs, _out(outdir), "ops_reduce")


def ops_shapes(outdir):
    rng = _rng(24)
    x = keras.Input((3, 4), name="x")
    v = keras.Input((4,), name="v")
    s = keras.Input((1, 4), name="s")
    parts = ops.split(x, 2, axis=2)
    parts2 = ops.split(x, [1], axis=1)
    un = ops.unstack(x, axis=1)
    outs = [
        ops.expand_dims(v, 1), ops.expand_dims(v, -1), ops.squeeze(s, axis=1), ops.squeeze(s),
        ops.reshape(x, (-1, 12)), ops.reshape(x, (-1, 2, 6)), ops.reshape(x, (-1, 6, 2)),
        ops.transpose(x, (0, 2, 1)), ops.swapaxes(x, 1, 2), ops.moveaxis(ops.expand_dims(x, 1), 1, -1),
        ops.broadcast_to(ops.expand_dims(v, 1), (3, 3, 4)),
        ops.tile(x, (1, 2, 3)), ops.tile(v, (2,)), ops.repeat(x, 2, axis=1),
        ops.repeat(x, 3, axis=-1), ops.concatenate([x, s], axis=1),
        ops.concatenate([x, x * 2.0], axis=-1), ops.stack([v, v * 3.0], axis=1),
        ops.stack([v, v], axis=-1), parts[0], parts[1] * 1.0, parts2[0], parts2[1] * 1.0, un[0],
        un[2] * 1.0,
    ]
    model = _model([x, v, s], outs, "ops_shapes")
    inputs = {"x": rng.normal(size=(3, 3, 4)).astype("float32"),
              "v": rng.normal(size=(3, 4)).astype("float32"),
              "s": rng.normal(size=(3, 1, 4)).astype("float32")}
    save_reference(model, inputs, _out(outdir), "ops_shapes")


def ops_index(outdir):
    rng = _rng(25)
    x = keras.Input((4, 5), name="x")
    outs = [
        x[:, 0], x[:, -1], x[:, 1:3], x[:, ::2], x[:, ::-1], x[:, 1:, 2:4], x[..., 0],
        x[:, None, 2], x[:, 3:0:-2, ::3], x[..., 1:],
        ops.take(x, np.array([0, 2, 2]), axis=1), ops.take(x, np.array([[4, 0], [-1, 1]]), axis=2),
    ]
    model = _model([x], outs, "ops_index")
    inputs = {"x": rng.normal(size=(3, 4, 5)).astype("float32")}
    save_reference(model, inputs, _out(outdir), "ops_index")


def ops_products(outdir):
    rng = _rng(26)
    x = keras.Input((3, 4), name="x")
    y = keras.Input((4, 2), name="y")
    q = keras.Input((5, 2, 3), name="q")  # [batch, T, heads, dim]
    k = keras.Input((6, 2, 3), name="k")
    w = rng.normal(size=(4, 3)).astype("float32")
    outs = [
        ops.matmul(x, y), ops.matmul(x, w), ops.matmul(x, ops.transpose(x, (0, 2, 1))),
        ops.matmul(x, np.array([1.0, 0.5, -1.0, 2.0], dtype="float32")),
        ops.einsum("bij,bjk->bik", x, y), ops.einsum("bij,jk->bik", x, w),
        ops.einsum("aecd,abcd->acbe", q, k), ops.einsum("bij->bji", x), ops.einsum("bij->bi", x),
        ops.einsum("bqhd,bkhd->bhqk", q, k),
    ]
    scores = ops.einsum("aecd,abcd->acbe", k, q)  # [batch, heads, T_q, T_k]
    outs.append(ops.einsum("acbe,aecd->abcd", ops.softmax(scores), k))
    model = _model([x, y, q, k], outs, "ops_products")
    inputs = {"x": rng.normal(size=(2, 3, 4)).astype("float32"),
              "y": rng.normal(size=(2, 4, 2)).astype("float32"),
              "q": rng.normal(size=(2, 5, 2, 3)).astype("float32"),
              "k": rng.normal(size=(2, 6, 2, 3)).astype("float32")}
    save_reference(model, inputs, _out(outdir), "ops_products")


def ops_types(outdir):
    rng = _rng(27)
    i = keras.Input((3,), name="i", dtype="int32")
    x = keras.Input((3, 4), name="x")
    outs = [
        ops.cast(i, "float32") * 0.5, ops.one_hot(i, 5), ops.one_hot(ops.argmax(x, axis=-1), 4),
        ops.cast(x, "float32"),
    ]
    model = _model([i, x], outs, "ops_types")
    inputs = {"i": rng.integers(0, 7, size=(4, 3)).astype("int64"),
              "x": rng.normal(size=(4, 3, 4)).astype("float32")}
    save_reference(model, inputs, _out(outdir), "ops_types")


FIXTURES = [ops_arith, ops_maps, ops_reduce, ops_shapes, ops_index, ops_products, ops_types]
