"""Whole Keras models, each with its training and test data, for `troupe train` and
`troupe predict` to run and Keras to check (tests/keras/test_keras_models.cpp).

For each model NAME, under <outdir>/models/NAME/:
  model.keras         the compiled, untrained model (Keras 3 on JAX, fixed seeds)
  model.json          its model.to_json(): the architecture alone
  train.tfrecord      its training examples (tf.train.Example, features by input name)
  test.tfrecord       held-out examples
  test_inputs.npz     the same held-out examples' inputs, as numpy (for Keras's predict)
  info.json           {"steps": training steps that learn it, "metric": the metric to watch,
                       "backend": the Keras backend that predicts it}

The models are the ones a user brings: the TensorFlow parameter-server tutorial's
(StringLookup + Embedding + Dense), the MultiWorkerMirroredStrategy tutorial's CNN (with
Fashion-MNIST's pixels as data), DeepFM, Wide&Deep with multi-hot features, DCN-v2, and a
two-output CTR+CVR model with BatchNormalization and Dropout. And builtin_ctr: no model,
data for ctr_ps's built-in models (their .keras exports checked by Keras).
"""

import gzip
import json
import os

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import sparse_fixtures  # noqa: E402  (its Cross and FactorizationMachine, registered)
import tfrecord  # noqa: E402

Cross = sparse_fixtures.Cross
FactorizationMachine = sparse_fixtures.FactorizationMachine
layers = keras.layers


def _rng(n):
    keras.utils.set_random_seed(n)
    return np.random.default_rng(n)


def _write(outdir, name, model, train, test, inputs, info):
    """train/test: {column: array [n, ...]}; `inputs` the model's input names."""
    d = os.path.join(outdir, "models", name)
    os.makedirs(d, exist_ok=True)
    model.save(os.path.join(d, "model.keras"))
    with open(os.path.join(d, "model.json"), "w") as f:  # the architecture alone
        f.write(model.to_json())
    tfrecord.write(os.path.join(d, "train.tfrecord"), train)
    tfrecord.write(os.path.join(d, "test.tfrecord"), test)
    # Strings as a numpy string array (an object array needs pickle to load).
    np.savez(os.path.join(d, "test_inputs.npz"),
             **{k: test[k].astype(str) if test[k].dtype == object else test[k] for k in inputs})
    info.setdefault("backend", "jax")
    with open(os.path.join(d, "info.json"), "w") as f:
        json.dump(info, f)


def _split(columns, n_test):
    train = {k: v[n_test:] for k, v in columns.items()}
    test = {k: v[:n_test] for k, v in columns.items()}
    return train, test


def _clicks(rng, logit):
    """Labels drawn from a teacher's logits (so a model can learn them, with noise)."""
    return (rng.random(logit.shape) < 1 / (1 + np.exp(-logit))).astype(np.int64)


def model_ps_tutorial(outdir):
    """TensorFlow's parameter-server tutorial: three string features looked up in a
    vocabulary, embedded, averaged, one sigmoid unit; label "yes" for the feature words of
    the first half of the vocabulary."""
    rng = _rng(11)
    vocab = ["avenger", "ironman", "batman", "hulk", "spiderman", "kingkong", "wonder_woman"]
    x = keras.Input((3,), dtype="string", name="features")
    # Adapted, as the tutorial's is: its vocabulary goes among the .keras file's assets.
    lookup = layers.StringLookup(name="feature_lookup")
    lookup.adapt(vocab)
    ids = lookup(x)
    emb = layers.Embedding(lookup.vocabulary_size(), 16, name="embedding")(ids)
    pooled = layers.GlobalAveragePooling1D()(emb)
    y = layers.Dense(1, activation="sigmoid", name="dense")(pooled)
    model = keras.Model(x, y)
    model.compile(optimizer=keras.optimizers.RMSprop(0.05), loss="binary_crossentropy",
                  metrics=["accuracy"])
    n = 4096 + 256
    words = np.array(vocab + ["unknown"])[rng.integers(0, len(vocab) + 1, size=(n, 3))]
    positive = np.isin(words, vocab[:3]).sum(axis=1) >= 2
    cols = {"features": words.astype(object), "label": positive.astype(np.int64)}
    train, test = _split(cols, 256)
    _write(outdir, "ps_tutorial", model, train, test, ["features"],
           {"steps": 300, "metric": "accuracy", "backend": "tensorflow"})


def _fashion(path, n):
    data = gzip.open(path).read()
    offset = 16 if data[3] == 3 else 8
    return np.frombuffer(data, dtype=np.uint8, offset=offset)[: n * (784 if offset == 16 else 1)]


def model_mwms_cnn(outdir):
    """The MultiWorkerMirroredStrategy tutorial's CNN, on Fashion-MNIST's pixels."""
    _rng(12)
    x = keras.Input((28, 28), name="image")
    h = layers.Rescaling(1 / 255.0)(x)
    h = layers.Reshape((28, 28, 1))(h)
    h = layers.Conv2D(32, 3, activation="relu")(h)
    h = layers.Flatten()(h)
    h = layers.Dense(128, activation="relu")(h)
    y = layers.Dense(10, name="logits")(h)
    model = keras.Model(x, y)
    model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    root = "/usr/share/datasets/fashion-mnist"
    n = 2048 + 256
    images = _fashion(os.path.join(root, "train-images-idx3-ubyte.gz"), n).reshape(n, 28, 28)
    labels = _fashion(os.path.join(root, "train-labels-idx1-ubyte.gz"), n)
    cols = {"image": images.astype(np.float32), "label": labels.astype(np.int64)}
    train, test = _split(cols, 256)
    _write(outdir, "mwms_cnn", model, train, test, ["image"],
           {"steps": 64, "metric": "accuracy"})


def _ctr_data(rng, n, fields, vocab, dense):
    """Categorical ids per field (with a popular head), dense features, and a teacher's
    clicks from both."""
    ids = np.minimum(rng.zipf(1.3, size=(n, fields)) - 1, vocab // fields - 1)
    ids = ids + np.arange(fields) * (vocab // fields)  # each field its own id range
    x = rng.normal(size=(n, dense)).astype(np.float32)
    weights = rng.normal(size=vocab)
    logit = weights[ids].sum(axis=1) * 0.7 + x @ rng.normal(size=dense) * 0.5 - 0.5
    return ids.astype(np.int64), x, _clicks(rng, logit)


def model_deepfm(outdir):
    """DeepFM as an ordinary graph: an Embedding of the fields' ids, the FM interactions,
    a linear term, and an MLP over the embeddings and the dense features."""
    rng = _rng(13)
    fields, vocab, dense, k = 8, 400, 4, 8
    cat = keras.Input((fields,), dtype="int64", name="cat")
    num = keras.Input((dense,), name="num")
    emb = layers.Embedding(vocab, k, name="embedding")(cat)
    fm = FactorizationMachine(name="fm")(emb)
    linear = layers.Flatten()(layers.Embedding(vocab, 1, name="linear")(cat))
    linear = layers.Dense(1, name="linear_sum")(layers.Concatenate()([linear, num]))
    deep = layers.Concatenate()([layers.Flatten()(emb), num])
    deep = layers.Dense(64, activation="relu")(deep)
    deep = layers.Dense(64, activation="relu")(deep)
    deep = layers.Dense(1)(deep)
    y = layers.Activation("sigmoid", name="click")(layers.Add()([fm, linear, deep]))
    model = keras.Model([cat, num], y)
    model.compile(optimizer=keras.optimizers.Adam(0.003), loss="binary_crossentropy",
                  metrics=[keras.metrics.AUC(name="auc")])
    ids, x, label = _ctr_data(rng, 8192 + 512, fields, vocab, dense)
    train, test = _split({"cat": ids, "num": x, "label": label}, 512)
    _write(outdir, "deepfm", model, train, test, ["cat", "num"], {"steps": 200, "metric": "auc"})


def model_wide_deep(outdir):
    """Wide&Deep with a multi-hot history (a fixed-length list of ids, 0 the padding)."""
    rng = _rng(14)
    vocab, hist, dense = 300, 6, 4
    user = keras.Input((), dtype="int64", name="user")
    history = keras.Input((hist,), dtype="int64", name="history")
    num = keras.Input((dense,), name="num")
    items = layers.Embedding(vocab, 8, name="items")
    h = layers.GlobalAveragePooling1D()(items(history))
    u = layers.Embedding(vocab, 8, name="users")(user)
    deep = layers.Concatenate()([h, u, num])
    deep = layers.Dense(32, activation="relu")(deep)
    deep = layers.Dense(1)(deep)
    wide = layers.GlobalAveragePooling1D()(layers.Embedding(vocab, 1, name="wide")(history))
    wide = layers.Dense(1, name="wide_dense")(layers.Concatenate()([wide, num]))
    y = layers.Activation("sigmoid", name="click")(layers.Add()([wide, deep]))
    model = keras.Model([user, history, num], y)
    model.compile(optimizer=keras.optimizers.Adagrad(0.1), loss="binary_crossentropy",
                  metrics=[keras.metrics.AUC(name="auc")])
    n = 8192 + 512
    users = rng.integers(1, vocab, size=n)
    lengths = rng.integers(1, hist + 1, size=n)
    items_ = rng.integers(1, vocab, size=(n, hist))
    items_[np.arange(hist)[None, :] >= lengths[:, None]] = 0  # padded
    x = rng.normal(size=(n, dense)).astype(np.float32)
    taste = rng.normal(size=vocab)
    logit = taste[items_].sum(axis=1) / lengths + taste[users] * 0.5 + x[:, 0]
    cols = {"user": users.astype(np.int64), "history": items_.astype(np.int64), "num": x,
            "label": _clicks(rng, logit)}
    train, test = _split(cols, 512)
    _write(outdir, "wide_deep", model, train, test, ["user", "history", "num"],
           {"steps": 200, "metric": "auc"})


def model_dcn_v2(outdir):
    """DCN-v2: the embeddings and dense features crossed by a full-rank and a low-rank
    TFRS Cross layer, then an MLP."""
    rng = _rng(15)
    fields, vocab, dense = 6, 300, 4
    cat = keras.Input((fields,), dtype="int64", name="cat")
    num = keras.Input((dense,), name="num")
    x0 = layers.Concatenate()([layers.Flatten()(layers.Embedding(vocab, 4, name="embedding")(cat)),
                               num])
    x = Cross(kernel_initializer="glorot_uniform", name="cross_full")(x0)
    x = Cross(projection_dim=4, kernel_initializer="glorot_uniform", name="cross_low")(x0, x)
    x = layers.Dense(32, activation="relu")(x)
    y = layers.Dense(1, activation="sigmoid", name="click")(x)
    model = keras.Model([cat, num], y)
    model.compile(optimizer=keras.optimizers.Adam(0.003), loss="binary_crossentropy",
                  metrics=[keras.metrics.AUC(name="auc")])
    ids, x_, label = _ctr_data(rng, 8192 + 512, fields, vocab, dense)
    train, test = _split({"cat": ids, "num": x_, "label": label}, 512)
    _write(outdir, "dcn_v2", model, train, test, ["cat", "num"], {"steps": 200, "metric": "auc"})


def model_two_output(outdir):
    """A CTR+CVR model: a shared bottom (Embedding, BatchNormalization, Dropout) and two
    sigmoid heads, the conversion loss weighted 0.5."""
    rng = _rng(16)
    fields, vocab, dense = 6, 300, 4
    cat = keras.Input((fields,), dtype="int64", name="cat")
    num = keras.Input((dense,), name="num")
    h = layers.Concatenate()([layers.Flatten()(layers.Embedding(vocab, 4, name="embedding")(cat)),
                              num])
    h = layers.Dense(32, activation="relu")(h)
    h = layers.BatchNormalization()(h)
    h = layers.Dropout(0.1)(h)
    ctr = layers.Dense(1, activation="sigmoid", name="ctr")(h)
    cvr = layers.Dense(1, activation="sigmoid", name="cvr")(h)
    model = keras.Model([cat, num], [ctr, cvr])
    model.compile(optimizer=keras.optimizers.Adam(0.003),
                  loss={"ctr": "binary_crossentropy", "cvr": "binary_crossentropy"},
                  loss_weights={"ctr": 1.0, "cvr": 0.5},
                  metrics={"ctr": [keras.metrics.AUC(name="auc")],
                           "cvr": [keras.metrics.AUC(name="auc")]})
    ids, x, click = _ctr_data(rng, 8192 + 512, fields, vocab, dense)
    convert = click * _clicks(rng, x[:, 1] * 2.0)
    train, test = _split({"cat": ids, "num": x, "ctr": click, "cvr": convert}, 512)
    _write(outdir, "two_output", model, train, test, ["cat", "num"],
           {"steps": 200, "metric": "ctr_auc"})


def model_builtin_ctr(outdir):
    """No Keras model: data in ctr_ps's TFRecord layout (`ids` [26], the global row ids of
    64 buckets a field; `dense` [13]; `label` a float) for ctr_ps to train its built-in models
    on and export as .keras files, which Keras then loads and predicts with."""
    rng = _rng(19)
    fields, buckets, dense = 26, 64, 13
    ids, x, label = _ctr_data(rng, 4096 + 512, fields, fields * buckets, dense)
    train, test = _split({"ids": ids, "dense": x, "label": label.astype(np.float32)}, 512)
    d = os.path.join(outdir, "models", "builtin_ctr")
    os.makedirs(d, exist_ok=True)
    tfrecord.write(os.path.join(d, "train-00000-of-00001.tfrecord"), train)
    tfrecord.write(os.path.join(d, "test.tfrecord"), test)
    np.savez(os.path.join(d, "test_inputs.npz"), ids=test["ids"], dense=test["dense"])
    with open(os.path.join(d, "info.json"), "w") as f:
        json.dump({"buckets": buckets, "backend": "jax"}, f)


def model_ops_cross(outdir):
    """A cross network written with keras.ops arithmetic, as Keras's DCN example writes it:
    x_{l+1} = x0 * (W x_l + b) + x_l over the embeddings and dense features, then an MLP."""
    from keras import ops
    rng = _rng(20)
    fields, vocab, dense = 6, 300, 4
    cat = keras.Input((fields,), dtype="int64", name="cat")
    num = keras.Input((dense,), name="num")
    x0 = layers.Concatenate()([layers.Flatten()(layers.Embedding(vocab, 4, name="embedding")(cat)),
                               num])
    x = x0
    for i in range(2):
        x = ops.add(ops.multiply(x0, layers.Dense(x0.shape[-1], name=f"cross_{i}")(x)), x)
    x = layers.Dense(16, activation="relu")(x)
    y = layers.Dense(1, activation="sigmoid", name="click")(x)
    model = keras.Model([cat, num], y)
    model.compile(optimizer=keras.optimizers.Adam(0.003), loss="binary_crossentropy",
                  metrics=[keras.metrics.AUC(name="auc")])
    ids, x_, label = _ctr_data(rng, 8192 + 512, fields, vocab, dense)
    train, test = _split({"cat": ids, "num": x_, "label": label}, 512)
    _write(outdir, "ops_cross", model, train, test, ["cat", "num"], {"steps": 200, "metric": "auc"})


def model_ops_tower(outdir):
    """An embedding tower shaped with keras.ops: one Embedding per categorical feature,
    expand_dims and stack into [batch, features, dim], the FM's pairwise term written with
    sum and square, the pairs' dot products by matmul and take, unstack for a linear part."""
    from keras import ops
    rng = _rng(21)
    features, vocab, dim = 3, 100, 6
    inputs = [keras.Input((), dtype="int64", name=f"f{i}") for i in range(features)]
    embs = [layers.Embedding(vocab, dim, name=f"emb_{i}")(x) for i, x in enumerate(inputs)]
    stacked = ops.stack(embs, axis=1)                                   # [b, 3, dim]
    towers = ops.concatenate([ops.expand_dims(e, 1) for e in embs], axis=1)
    square_of_sum = ops.square(ops.sum(stacked, axis=1))
    sum_of_square = ops.sum(ops.square(towers), axis=1)
    fm = 0.5 * ops.sum(square_of_sum - sum_of_square, axis=1, keepdims=True)
    dots = ops.matmul(stacked, ops.transpose(stacked, (0, 2, 1)))       # [b, 3, 3]
    pairs = ops.take(ops.reshape(dots, (-1, features * features)), np.array([1, 2, 5]), axis=1)
    first = ops.unstack(stacked, axis=1)[0]
    deep = layers.Dense(8, activation="relu")(ops.concatenate([pairs, first], axis=-1))
    logit = layers.Dense(1, name="deep_out")(deep) + fm
    y = layers.Activation("sigmoid", name="click")(logit)
    model = keras.Model(inputs, y)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="binary_crossentropy",
                  metrics=[keras.metrics.AUC(name="auc")])
    n = 8192 + 512
    ids = rng.integers(0, vocab, size=(n, features))
    taste = rng.normal(size=(features, vocab))
    logit_ = sum(taste[i][ids[:, i]] for i in range(features))
    cols = {f"f{i}": ids[:, i].astype(np.int64) for i in range(features)}
    cols["label"] = _clicks(rng, logit_)
    train, test = _split(cols, 512)
    _write(outdir, "ops_tower", model, train, test, [f"f{i}" for i in range(features)],
           {"steps": 200, "metric": "auc"})


def model_ops_constant(outdir):
    """A model that normalizes its features by constants baked into it (a mean and a scale
    as arrays, as Keras's examples do without a Normalization layer), adds a constant
    tensor, and masks with where."""
    from keras import ops
    rng = _rng(22)
    dense = 5
    num = keras.Input((dense,), name="num")
    mean = np.array([1.0, -2.0, 0.5, 3.0, 0.0], dtype="float32")
    scale = np.array([2.0, 0.5, 1.0, 4.0, 1.5], dtype="float32")
    x = (num - mean) / scale
    x = ops.where(ops.abs(x) > 3.0, ops.sign(x) * 3.0, x)
    x = x + ops.convert_to_tensor(np.linspace(-0.1, 0.1, dense).astype("float32"))
    h = layers.Dense(16, activation="relu")(ops.expand_dims(x, -1)[:, :, 0])
    y = layers.Dense(1, activation="sigmoid", name="click")(h)
    model = keras.Model(num, y)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="binary_crossentropy",
                  metrics=["accuracy"])
    n = 4096 + 512
    x_ = (rng.normal(size=(n, dense)) * scale + mean).astype(np.float32)
    logit = ((x_ - mean) / scale) @ rng.normal(size=dense)
    train, test = _split({"num": x_, "label": _clicks(rng, 2 * logit)}, 512)
    _write(outdir, "ops_constant", model, train, test, ["num"], {"steps": 200, "metric": "accuracy"})


def model_hostile(outdir):
    """Model files crafted to harm a reader (a model is outside input, as a downloaded one
    is), each a small valid model with its config.json changed: deep.keras nests 200,000
    arrays in a layer's config, dense_2_40.keras asks a Dense of 2^40 units, input_2_40.keras
    an input of 2^40 values an example. With data the valid model trains on."""
    import zipfile
    rng = _rng(23)
    x = keras.Input((4,), name="num")
    h = layers.Dense(2, name="hidden")(x)
    y = layers.Dense(1, activation="sigmoid", name="click")(h)
    model = keras.Model(x, y)
    model.compile(optimizer="adam", loss="binary_crossentropy")
    cols = {"num": rng.normal(size=(64, 4)).astype(np.float32),
            "label": rng.integers(0, 2, size=64)}
    train, test = _split(cols, 16)
    _write(outdir, "hostile", model, train, test, ["num"], {"steps": 1, "metric": "loss"})
    d = os.path.join(outdir, "models", "hostile")
    src = os.path.join(d, "model.keras")
    config = json.loads(zipfile.ZipFile(src).read("config.json"))
    hidden = [l for l in config["config"]["layers"] if l["name"] == "hidden"][0]

    def write(name, text):
        with zipfile.ZipFile(src) as zin, zipfile.ZipFile(os.path.join(d, name), "w") as zout:
            for item in zin.infolist():
                data = text.encode() if item.filename == "config.json" else zin.read(item)
                zout.writestr(item, data)

    # json.dumps recurses once a level: the nesting is spliced in as text.
    hidden["config"]["nested"] = "@NESTED@"
    depth = 200000
    write("deep.keras", json.dumps(config).replace('"@NESTED@"', "[" * depth + "]" * depth))
    del hidden["config"]["nested"]
    hidden["config"]["units"] = 2 ** 40
    write("dense_2_40.keras", json.dumps(config))
    hidden["config"]["units"] = 2
    for l in config["config"]["layers"]:
        if l["class_name"] == "InputLayer":
            l["config"]["batch_shape"] = [None, 2 ** 40]
    write("input_2_40.keras", json.dumps(config))


def model_unsupported(outdir):
    """A model with a layer Troupe does not have (an LSTM), for the error it must give."""
    rng = _rng(17)
    x = keras.Input((5, 3), name="seq")
    y = layers.Dense(1, activation="sigmoid")(layers.LSTM(4, name="lstm")(x))
    model = keras.Model(x, y)
    model.compile(optimizer="adam", loss="binary_crossentropy")
    cols = {"seq": rng.normal(size=(64, 5, 3)).astype(np.float32),
            "label": rng.integers(0, 2, size=64)}
    train, test = _split(cols, 16)
    _write(outdir, "unsupported", model, train, test, ["seq"], {"steps": 1, "metric": "loss"})


FIXTURES = [model_unsupported, model_ps_tutorial, model_mwms_cnn, model_deepfm, model_wide_deep,
            model_dcn_v2, model_two_output, model_builtin_ctr, model_ops_cross, model_ops_tower,
            model_ops_constant, model_hostile]
