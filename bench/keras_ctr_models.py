"""The Keras 3 models of the Keras benchmarks (docs/benchmarks.md, "Keras models"), written
as .keras files that `troupe train` and bench/tf_keras_ps.py both train:

  deepfm     ctr_ps's DeepFM as a Functional graph over ctr_datagen's TFRecord features
             (`ids` [26] int64 global row ids, `dense` [13] float, `label`):
               logit = sum_f w[id_f] + FM(v[id_1..id_26]) + (u . dense + b)
                       + MLP(concat(flatten(v[id_f]), dense))
             v an Embedding(26 * buckets, dim) and w an Embedding(26 * buckets, 1), both
             RandomUniform(-0.05, 0.05) as ctr_ps's table; sum_f w as 26 * the mean
             (GlobalAveragePooling1D, then Rescaling(26)); the MLP's kernels and u
             Glorot-uniform, biases zero; the logit out, binary cross-entropy from logits.
  wide_deep  Wide&Deep with a multi-hot history (bench/wide_deep_data.py's features:
             `cat` [26] int64, `history` [H] int64, 0 the padding, `dense` [13]):
               wide: sum_f w[cat_f] + mean_h w'[history_h] + u . dense + b
               deep: MLP(concat(flatten(v[cat]), mean_h v'[history], dense))
  mlp        Fashion-MNIST's 784-128-10 MLP: Rescaling(1/255), Flatten, Dense(128, relu),
             Dense(10), sparse categorical cross-entropy from logits, accuracy (input
             `image` [28, 28], as `troupe train --format idx` reads it).
  cnn        the MultiWorkerMirroredStrategy tutorial's CNN on the same input: Rescaling,
             Reshape(28, 28, 1), Conv2D(32, 3, relu), Flatten, Dense(128, relu), Dense(10).

Run with the Keras venv (build/keras-venv, KERAS_BACKEND=jax):
  build/keras-venv/bin/python bench/keras_ctr_models.py deepfm --out /tmp/deepfm.keras \
      --buckets 4096 --dim 8 --hidden 64 64 --lr 0.2
Prints one JSON line: the file, its weights and their sizes.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "keras"))

import keras  # noqa: E402

import sparse_fixtures  # noqa: E402  (Troupe's FactorizationMachine, registered)

layers = keras.layers
FIELDS, DENSE = 26, 13


def table_init(seed):
    # ctr_ps's table: uniform in [-0.05, 0.05] (Keras's Embedding default, with a seed).
    return keras.initializers.RandomUniform(-0.05, 0.05, seed=seed)


def optimizer(name, lr):
    return {"adagrad": keras.optimizers.Adagrad, "sgd": keras.optimizers.SGD,
            "adam": keras.optimizers.Adam}[name](learning_rate=lr)


def mlp_head(x, hidden, seed):
    for i, h in enumerate(hidden):
        x = layers.Dense(h, activation="relu", name="dnn_%d" % i,
                         kernel_initializer=keras.initializers.GlorotUniform(seed + i))(x)
    return layers.Dense(1, name="dnn_out",
                        kernel_initializer=keras.initializers.GlorotUniform(seed + 100))(x)


def sum_over_fields(x, n, name):
    """[batch, n, 1] -> [batch, 1], their sum: the mean times n (Keras has no sum layer that
    Troupe reads; Rescaling after the average is exact up to rounding)."""
    return layers.Rescaling(float(n), name=name)(layers.GlobalAveragePooling1D()(x))


def ctr_compile(model, args):
    model.compile(optimizer=optimizer(args.optimizer, args.lr),
                  loss=keras.losses.BinaryCrossentropy(from_logits=True),
                  metrics=[keras.metrics.AUC(name="auc", from_logits=True)])


def deepfm(args):
    rows = FIELDS * args.buckets
    ids = keras.Input((FIELDS,), dtype="int64", name="ids")
    dense = keras.Input((DENSE,), name="dense")
    v = layers.Embedding(rows, args.dim, embeddings_initializer=table_init(args.seed),
                         name="embedding")(ids)
    w = layers.Embedding(rows, 1, embeddings_initializer=table_init(args.seed + 1),
                         name="linear")(ids)
    first = sum_over_fields(w, FIELDS, "first_order")
    fm = sparse_fixtures.FactorizationMachine(name="fm")(v)
    lin = layers.Dense(1, name="dense_linear",
                       kernel_initializer=keras.initializers.GlorotUniform(args.seed + 2))(dense)
    deep = layers.Concatenate(name="dnn_in")([layers.Flatten()(v), dense])
    deep = mlp_head(deep, args.hidden, args.seed + 3)
    logit = layers.Add(name="logit")([first, fm, lin, deep])
    model = keras.Model([ids, dense], logit, name="deepfm")
    ctr_compile(model, args)
    return model


def wide_deep(args):
    ids = keras.Input((FIELDS,), dtype="int64", name="cat")
    hist = keras.Input((args.history,), dtype="int64", name="history")
    dense = keras.Input((DENSE,), name="dense")
    cat_rows = FIELDS * args.buckets
    v = layers.Embedding(cat_rows, args.dim, embeddings_initializer=table_init(args.seed),
                         name="cat_embedding")(ids)
    h = layers.Embedding(args.items, args.dim, embeddings_initializer=table_init(args.seed + 1),
                         name="item_embedding")(hist)
    deep = layers.Concatenate(name="dnn_in")(
        [layers.Flatten()(v), layers.GlobalAveragePooling1D(name="history_mean")(h), dense])
    deep = mlp_head(deep, args.hidden, args.seed + 3)
    w = layers.Embedding(cat_rows, 1, embeddings_initializer=table_init(args.seed + 4),
                         name="cat_wide")(ids)
    wh = layers.Embedding(args.items, 1, embeddings_initializer=table_init(args.seed + 5),
                          name="item_wide")(hist)
    wide = layers.Add(name="wide")([
        sum_over_fields(w, FIELDS, "cat_wide_sum"),
        layers.GlobalAveragePooling1D(name="item_wide_mean")(wh),
        layers.Dense(1, name="dense_linear",
                     kernel_initializer=keras.initializers.GlorotUniform(args.seed + 2))(dense)])
    logit = layers.Add(name="logit")([wide, deep])
    model = keras.Model([ids, hist, dense], logit, name="wide_deep")
    ctr_compile(model, args)
    return model


def mlp(args):
    x = keras.Input((28, 28), name="image")
    h = layers.Rescaling(1 / 255.0)(x)
    h = layers.Flatten()(h)
    h = layers.Dense(128, activation="relu", name="hidden",
                     kernel_initializer=keras.initializers.GlorotUniform(args.seed))(h)
    y = layers.Dense(10, name="logits",
                     kernel_initializer=keras.initializers.GlorotUniform(args.seed + 1))(h)
    model = keras.Model(x, y, name="mlp")
    model.compile(optimizer=optimizer(args.optimizer, args.lr),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def cnn(args):
    x = keras.Input((28, 28), name="image")
    h = layers.Rescaling(1 / 255.0)(x)
    h = layers.Reshape((28, 28, 1))(h)
    h = layers.Conv2D(32, 3, activation="relu", name="conv2d",
                      kernel_initializer=keras.initializers.GlorotUniform(args.seed))(h)
    h = layers.Flatten()(h)
    h = layers.Dense(128, activation="relu", name="hidden",
                     kernel_initializer=keras.initializers.GlorotUniform(args.seed + 1))(h)
    y = layers.Dense(10, name="logits",
                     kernel_initializer=keras.initializers.GlorotUniform(args.seed + 2))(h)
    model = keras.Model(x, y, name="cnn")
    model.compile(optimizer=optimizer(args.optimizer, args.lr),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=["deepfm", "wide_deep", "mlp", "cnn"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--buckets", type=int, default=4096, help="rows of each of the 26 fields")
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--hidden", type=int, nargs="*", default=[64, 64])
    ap.add_argument("--history", type=int, default=20, help="wide_deep: ids in the history")
    ap.add_argument("--items", type=int, default=100000, help="wide_deep: item vocabulary")
    ap.add_argument("--optimizer", default=None, help="adagrad (CTR models) or sgd (mlp)")
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.optimizer is None:
        args.optimizer = "sgd" if args.model in ("mlp", "cnn") else "adagrad"
    if args.lr is None:
        args.lr = 0.1 if args.model == "mlp" else 0.01 if args.model == "cnn" else 0.2
    keras.utils.set_random_seed(args.seed)
    model = {"deepfm": deepfm, "wide_deep": wide_deep, "mlp": mlp, "cnn": cnn}[args.model](args)
    model.save(args.out)
    print(json.dumps({"model": args.model, "out": args.out, "params": model.count_params(),
                      "weights": {w.path: list(w.shape) for w in model.weights},
                      "optimizer": args.optimizer, "lr": args.lr}))


if __name__ == "__main__":
    main()
