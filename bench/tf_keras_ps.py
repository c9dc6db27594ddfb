#!/opt/tfpeer/bin/python
# Peer for `troupe train`: the same .keras model (bench/keras_ctr_models.py: architecture,
# initial weights, optimizer and rate from the file) trained by Keras on TensorFlow 2.21 under
# ParameterServerStrategy, as real processes on 127.0.0.1 (as bench/tf_ps_ctr.py starts them).
#
#   /opt/tfpeer/bin/python bench/tf_keras_ps.py --model deepfm.keras \
#       --data /tmp/ctr/train-*.tfrecord --validation /tmp/ctr/heldout.tfrecord \
#       --ps 2 --workers 2 --batch 512 --steps 3200
#
# Two ways to train it (--api), both TensorFlow's own:
#   keras3    the .keras file loaded by Keras 3 (TensorFlow backend) inside the strategy's
#             scope (every variable whole, on the PS tasks round-robin: Keras 3 has no
#             partitioned variables), and a ClusterCoordinator custom loop: each closure
#             takes a batch, runs the model under a GradientTape, applies the file's optimizer
#             and updates the compiled metrics (their variables on the PS, as TensorFlow's
#             custom-loop tutorial makes them).
#   tf_keras  the same graph rebuilt layer by layer in tf_keras (Keras 2) with the file's
#             initial weights and optimizer, model.fit under the strategy with a
#             MinSizePartitioner(256 KiB, one shard a PS task at most) as TensorFlow's
#             parameter-server tutorial sets it (what `troupe train` partitions by), applied
#             to the embedding tables (variables of 65536 rows or more); dense variables
#             whole (tf_keras's mixed precision cannot wrap a sharded kernel).
# --steps is the total number of steps (Keras's steps_per_epoch, as `troupe train --steps`);
# each worker reads every --data file (repeat, batch, then parse_example).
# examples_per_sec = steps * batch / the training window: first schedule to join() (keras3),
# model.fit's call (tf_keras); tracing is inside both. Then the chief scores --validation:
# AUC from ranks (ctr_metrics.auc_of, exact) and Keras's own compiled metrics.
# --score M.keras scores a model file (a trained one, e.g. troupe train --out) the same way,
# in this process, without a cluster.
# Threads: intra-op 1, inter-op 2 (as tf_ps_ctr.py; TFPEER_INTRA / TFPEER_INTER override).
import argparse
import glob
import json
import os
import sys
import tempfile
import time
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "keras"))

from ctr_metrics import auc_of, logloss_of  # noqa: E402
from tf_cluster import INTER, INTRA, run_cluster, serve, threads_config  # noqa: E402

def read_config(path):
    with zipfile.ZipFile(path) as z:
        return json.loads(z.read("config.json"))


def with_precision(path, precision):
    """The file itself for float32; for mixed_bfloat16 a copy whose Dense layers take Keras's
    mixed_bfloat16 policy (bf16 products and activations, float32 variables): the layers
    whose products Troupe's --precision mixed_bfloat16 runs in bf16."""
    if precision == "float32":
        return path
    cfg = read_config(path)
    for layer in cfg["config"]["layers"]:
        if layer["class_name"] == "Dense":
            layer["config"]["dtype"] = {"module": "keras", "class_name": "DTypePolicy",
                                        "config": {"name": precision}, "registered_name": None}
    fd, out = tempfile.mkstemp(suffix=".keras")
    os.close(fd)
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(out, "w") as zout:
        for item in zin.infolist():
            data = json.dumps(cfg).encode() if item.filename == "config.json" else zin.read(item)
            zout.writestr(item, data)
    return out


def input_specs(model):
    """(name, per-example shape, dtype) of each model input, in the model's order."""
    return [(t.name, tuple(t.shape[1:]), t.dtype) for t in model.inputs]


def parse_fn(tf, specs, label):
    features = {label: tf.io.FixedLenFeature([1], tf.float32)}
    for name, shape, dtype in specs:
        features[name] = tf.io.FixedLenFeature(list(shape), tf.int64 if "int" in str(dtype)
                                               else tf.float32)
    names = [s[0] for s in specs]

    def parse(serialized):
        f = tf.io.parse_example(serialized, features)
        x = {n: f[n] for n in names}
        return x, f[label]
    return parse


def score(tf, model, specs, files, label, batch=4096):
    """Exact AUC (ranks) and log loss of the model's sigmoid outputs on `files`."""
    import numpy as np
    ds = tf.data.TFRecordDataset(files).batch(batch).map(parse_fn(tf, specs, label))
    predict = tf.function(lambda x: model(x, training=False))
    scores, labels = [], []
    for x, y in ds:
        scores.append(tf.cast(predict(x), tf.float32).numpy().ravel())
        labels.append(y.numpy().ravel())
    logits, labels = np.concatenate(scores), np.concatenate(labels)
    p = 1 / (1 + np.exp(-logits.astype(np.float64)))
    return {"auc_exact": auc_of(p, labels), "logloss": logloss_of(p, labels),
            "eval_examples": int(len(labels))}


# ---- keras3: the file in Keras 3, a ClusterCoordinator loop ---------------------------------

def train_keras3(args, tf, keras, strategy, files):
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    path = with_precision(args.model, args.precision)
    with strategy.scope():
        model = keras.saving.load_model(path)
        opt = model.optimizer
        opt.build(model.trainable_variables)
        loss_fn = model.loss
        metrics = [keras.metrics.deserialize(m) for m in read_config(args.model)
                   ["compile_config"]["metrics"]]
    specs = input_specs(model)
    parse = parse_fn(tf, specs, args.label)

    def dataset_fn():
        ds = tf.data.TFRecordDataset(files).repeat().batch(args.batch, drop_remainder=True)
        return ds.map(parse, num_parallel_calls=1).prefetch(2)

    per_worker = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function
    def train_step(it):
        def replica_fn(x, y):
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                loss = loss_fn(y, tf.cast(logits, tf.float32))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            for m in metrics:
                m.update_state(y, logits)
            return loss
        x, y = next(it)
        return strategy.run(replica_fn, args=(x, y))

    t0 = time.perf_counter()
    last = None
    for i in range(args.steps):
        last = coordinator.schedule(train_step, args=(per_worker,))
        if i == 0:
            t_traced = time.perf_counter()
    coordinator.join()
    t1 = time.perf_counter()
    logs = {"last_loss": float(last.fetch())}
    for m in metrics:
        logs[m.name] = float(m.result())
    return model, specs, t1 - t0, t_traced - t0, logs


# ---- tf_keras: the same graph in Keras 2, model.fit ----------------------------------------

def tf_keras_fm(tf_keras, tf):
    """Troupe's FactorizationMachine for tf_keras: the same formula as sparse_fixtures'."""
    class FactorizationMachine(tf_keras.layers.Layer):
        def call(self, x):
            total = tf.reduce_sum(x, axis=1)
            return 0.5 * tf.reduce_sum(tf.square(total) - tf.reduce_sum(tf.square(x), axis=1),
                                       axis=-1, keepdims=True)
    return FactorizationMachine


# Keras 3 config keys tf_keras's layers do not take.
_DROP = {"quantization_config", "optional", "lora_rank", "lora_alpha", "batch_shape"}


def tf_keras_model(tf, tf_keras, cfg, precision):
    """The Functional graph of a Keras 3 config.json rebuilt with tf_keras's layers: each
    layer from its class name and arguments, connected by its inbound nodes' keras_history."""
    fm = tf_keras_fm(tf_keras, tf)
    tensors, inputs = {}, []
    for layer in cfg["config"]["layers"]:
        cls, c = layer["class_name"], dict(layer["config"])
        if cls == "InputLayer":
            t = tf_keras.Input(batch_shape=c["batch_shape"], dtype=c["dtype"], name=c["name"])
            tensors[(layer["name"], 0, 0)] = t
            inputs.append(t)
            continue
        for k in list(c):
            if k in _DROP:
                del c[k]
        policy = c.pop("dtype", None)
        if isinstance(policy, dict):
            policy = policy["config"]["name"]
        if cls == "Dense" and precision != "float32":
            policy = precision
        if policy:
            c["dtype"] = tf_keras.mixed_precision.Policy(policy)
        for k in ("kernel_initializer", "bias_initializer", "embeddings_initializer"):
            c.pop(k, None)  # the file's initial weights are copied in afterwards
        klass = fm if cls == "FactorizationMachine" else getattr(tf_keras.layers, cls)
        made = klass(**c)
        for node_index, node in enumerate(layer["inbound_nodes"]):
            args = node["args"]
            refs = args[0] if isinstance(args[0], list) else [args[0]]
            ins = [tensors[tuple(r["config"]["keras_history"])] for r in refs]
            out = made(ins if isinstance(args[0], list) else ins[0], **node.get("kwargs", {}))
            tensors[(layer["name"], node_index, 0)] = out
    outs = cfg["config"]["output_layers"]
    outputs = [tensors[tuple(o)] for o in (outs if isinstance(outs[0], list) else [outs])]
    return tf_keras.Model(inputs, outputs[0] if len(outputs) == 1 else outputs)


def split_rows(shards, values):
    """The file's weights as set_weights takes them where the partitioner split a variable
    into shards by rows (layer.weights lists the shards, in row order)."""
    out, it = [], iter(shards)
    for v in values:
        rows = 0
        while rows < max(1, v.shape[0] if v.ndim else 1):
            shard = next(it)
            n = shard.shape[0] if v.ndim else 1
            out.append(v[rows:rows + n] if v.ndim else v)
            rows += n
    return out


def train_tf_keras(args, tf, keras, strategy, files):
    import tf_keras
    cfg = read_config(args.model)
    compile_cfg = cfg["compile_config"]
    source = keras.saving.load_model(args.model, compile=False)  # the file's initial weights
    opt_cfg = compile_cfg["optimizer"]
    with strategy.scope():
        model = tf_keras_model(tf, tf_keras, cfg, args.precision)
        for layer in model.layers:
            if layer.weights:
                layer.set_weights(split_rows(layer.weights,
                                             source.get_layer(layer.name).get_weights()))
        opt = tf_keras.optimizers.get({"class_name": opt_cfg["class_name"], "config": {
            k: v for k, v in opt_cfg["config"].items()
            if k in ("learning_rate", "initial_accumulator_value", "epsilon", "momentum",
                     "nesterov", "beta_1", "beta_2", "amsgrad")}})
        loss = tf_keras.losses.get({"class_name": compile_cfg["loss"]["class_name"],
                                    "config": {"from_logits": compile_cfg["loss"]["config"]
                                               .get("from_logits", False)}})
        metrics = [tf_keras.metrics.AUC(name=m["config"]["name"],
                                        from_logits=m["config"].get("from_logits", False))
                   for m in compile_cfg["metrics"] if m["class_name"] == "AUC"]
        model.compile(optimizer=opt, loss=loss, metrics=metrics)
    specs = [(t.name, tuple(t.shape[1:]), t.dtype) for t in source.inputs]
    parse = parse_fn(tf, specs, args.label)

    def dataset_fn(context):
        ds = tf.data.TFRecordDataset(files).repeat().batch(args.batch, drop_remainder=True)
        return ds.map(parse, num_parallel_calls=1).prefetch(2)

    window = {}

    class Window(tf_keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            window["t0"] = time.perf_counter()

        def on_train_end(self, logs=None):
            window["t1"] = time.perf_counter()

    t_fit = time.perf_counter()
    history = model.fit(tf_keras.utils.experimental.DatasetCreator(dataset_fn), epochs=1,
                        steps_per_epoch=args.steps, callbacks=[Window()], verbose=0)
    logs = {k: float(v[-1]) for k, v in history.history.items()}
    logs["fit_s"] = round(time.perf_counter() - t_fit, 4)
    return model, specs, window["t1"] - window["t0"], 0.0, logs


def chief(args):
    import tensorflow as tf
    threads_config(tf)
    import keras
    import sparse_fixtures  # noqa: F401  (Troupe's FactorizationMachine, registered)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    partitioner = None
    if args.api == "tf_keras":
        min_size = tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=256 << 10, max_shards=args.ps)

        def partitioner(shape, dtype):
            # The embedding tables only (tf_keras's mixed precision cannot wrap a sharded
            # Dense kernel in its AutoCastVariable); dense variables whole.
            if shape.rank == 2 and shape[0] >= 65536:
                return min_size(shape, dtype)
            return [1] * shape.rank
    strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    files = sorted(f for pattern in args.data for f in glob.glob(pattern))
    train = train_keras3 if args.api == "keras3" else train_tf_keras
    model, specs, train_s, trace_s, logs = train(args, tf, keras, strategy, files)
    out = {"peer": "tf_keras_ps", "api": args.api, "tf_version": tf.__version__,
           "keras_version": keras.__version__, "model": os.path.basename(args.model),
           "ps": args.ps, "workers": args.workers, "batch": args.batch, "steps": args.steps,
           "precision": args.precision, "examples": args.steps * args.batch,
           "train_s": round(train_s, 4), "trace_s": round(trace_s, 4),
           "examples_per_sec": round(args.steps * args.batch / train_s, 1),
           "threads": "intra=%d inter=%d" % (INTRA, INTER)}
    out.update(logs)
    if args.validation:
        out.update(score(tf, model, specs, args.validation, args.label))
    print(json.dumps(out), flush=True)


def score_only(args):
    os.environ["KERAS_BACKEND"] = "tensorflow"
    import tensorflow as tf
    threads_config(tf)
    import keras
    import sparse_fixtures  # noqa: F401
    model = keras.saving.load_model(args.score, compile=False)
    out = {"peer": "tf_keras_ps", "scored": args.score}
    out.update(score(tf, model, input_specs(model), args.validation, args.label))
    print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", default="chief", choices=["chief", "ps", "worker"])
    ap.add_argument("--model")
    ap.add_argument("--data", nargs="*", default=[])
    ap.add_argument("--validation", nargs="*", default=[])
    ap.add_argument("--label", default="label")
    ap.add_argument("--api", default="keras3", choices=["keras3", "tf_keras"])
    ap.add_argument("--ps", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--steps", type=int, default=3200, help="steps in all (all workers)")
    ap.add_argument("--precision", default="float32", choices=["float32", "mixed_bfloat16"])
    ap.add_argument("--score", help="score this model file on --validation and exit")
    args = ap.parse_args()
    os.environ["KERAS_BACKEND"] = "tensorflow"
    if args.score:
        score_only(args)
        return
    if args.role != "chief":
        serve()
        return
    run_cluster(__file__, [], args.ps, args.workers, lambda spec, procs: chief(args),
                extra_env={"KERAS_BACKEND": "tensorflow"})


if __name__ == "__main__":
    main()
