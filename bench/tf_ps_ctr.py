#!/opt/tfpeer/bin/python
# Peer for ctr_ps: TensorFlow 2's ParameterServerStrategy + ClusterCoordinator training the same
# DeepFM on the same ctr_datagen TFRecord files, as real processes on 127.0.0.1.
#
#   /opt/tfpeer/bin/python bench/tf_ps_ctr.py --data /tmp/ctr --ps 2 --workers 2 \
#       --batch 1024 --steps 200 --buckets-per-field 65536
#
# The chief (this script) starts --ps ps tasks and --workers worker tasks (this script again,
# --role ps|worker, each with its TF_CONFIG and a tf.distribute.Server). The embedding table
# [26 * buckets, 1 + dim] (column 0 the first-order weight, as ctr_ps) is split into --ps row
# ranges, one variable per ps task (TensorFlow's "div" partitioning, done by hand: with a
# variable_partitioner, scatter updates of the ShardedVariable diverged in TF 2.21 here while
# the same model on one unsharded table trained); the dense variables stay whole. Each worker reads every train-*.tfrecord file (repeat, batch,
# then parse_example: the batch-then-map order of TensorFlow's guidance), looks up the unique
# ids of its batch, and applies Adagrad on the ps: dense variables whole, the table's rows with
# scatter ops on the touched rows only (what TensorFlow's sparse Adagrad does). Model: DeepFM
# (first order + FM + DNN on concat(embeddings, dense)), sigmoid cross-entropy, as ctr_ps.
# Timing: examples_per_sec = steps * workers * batch / (join() - first schedule()); the window
# includes tracing (trace_s). The held-out file is scored on the chief (AUC from ranks).
# Processes and threads: bench/tf_cluster.py.
import argparse
import json
import os
import time

from ctr_metrics import auc_of, logloss_of, teacher_of
from tf_cluster import INTER, INTRA, run_cluster, serve, threads_config

FIELDS, DENSE = 26, 13
def chief(args, spec, procs):
    import numpy as np
    import tensorflow as tf
    threads_config(tf)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    rows, width, k = FIELDS * args.buckets_per_field, 1 + args.dim, args.dim
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    shard_rows = -(-rows // args.ps)
    widths = [FIELDS * k + DENSE] + args.hidden + [1]
    with strategy.scope():
        # Created in this order, variables go round-robin over the ps tasks: shard i of the
        # table and of its accumulator both on ps i.
        init = tf.random.stateless_uniform([rows, width], [args.seed, 1], -0.05, 0.05)
        tables = [tf.Variable(init[i * shard_rows:(i + 1) * shard_rows], name="embedding_%d" % i)
                  for i in range(args.ps)]
        table_accs = [tf.Variable(tf.fill(t.shape, 0.1), name="embedding_acc_%d" % i)
                      for i, t in enumerate(tables)]
        dense = [tf.Variable(tf.zeros([1]), name="bias"),
                 tf.Variable(tf.random.stateless_uniform([DENSE, 1], [args.seed, 2], -0.6, 0.6),
                             name="dense_w")]
        for i in range(len(widths) - 1):
            lim = np.sqrt(6.0 / (widths[i] + widths[i + 1]))
            dense.append(tf.Variable(tf.random.stateless_uniform(
                [widths[i], widths[i + 1]], [args.seed, 3 + i], -lim, lim), name="kernel%d" % i))
            dense.append(tf.Variable(tf.zeros([widths[i + 1]]), name="bias%d" % i))
        dense_acc = [tf.Variable(tf.fill(v.shape, 0.1), name=v.name.split(":")[0] + "_acc")
                     for v in dense]

    features = {"label": tf.io.FixedLenFeature([1], tf.float32),
                "ids": tf.io.FixedLenFeature([FIELDS], tf.int64),
                "dense": tf.io.FixedLenFeature([DENSE], tf.float32)}

    def parse(serialized):
        f = tf.io.parse_example(serialized, features)
        return f["label"], f["ids"], f["dense"]

    files = sorted(os.path.join(args.data, f) for f in os.listdir(args.data)
                   if f.startswith("train-") and f.endswith(".tfrecord"))

    def dataset_fn():
        ds = tf.data.TFRecordDataset(files).repeat().batch(args.batch, drop_remainder=True)
        return ds.map(parse, num_parallel_calls=1).prefetch(2)

    def forward(rows_u, idx, dense_x):
        r = tf.reshape(tf.gather(rows_u, idx), [-1, FIELDS, width])
        w, v = r[:, :, 0], r[:, :, 1:]
        logit = dense[0] + tf.reduce_sum(w, 1, keepdims=True) + tf.matmul(dense_x, dense[1])
        s = tf.reduce_sum(v, 1)
        logit += 0.5 * tf.reduce_sum(s * s - tf.reduce_sum(v * v, 1), 1, keepdims=True)
        h = tf.concat([tf.reshape(v, [-1, FIELDS * k]), dense_x], 1)
        layers = dense[2:]
        for i in range(0, len(layers), 2):
            if args.precision == "mixed_bfloat16":
                # Keras' mixed_bfloat16 for a Dense layer: bf16 operands (oneDNN's bf16 matmul
                # on this CPU), float32 variables; the product back in float32, as Troupe's.
                h = tf.cast(tf.matmul(tf.cast(h, tf.bfloat16), tf.cast(layers[i], tf.bfloat16)),
                            tf.float32) + layers[i + 1]
            else:
                h = tf.matmul(h, layers[i]) + layers[i + 1]
            if i + 2 < len(layers):
                h = tf.nn.relu(h)
        return logit + h

    def route(unique):
        # Each id's shard, its row there, and its position in `unique` (TensorFlow's "div"
        # partition strategy, by hand).
        part = tf.cast(unique // shard_rows, tf.int32)
        local = tf.dynamic_partition(unique - tf.cast(part, tf.int64) * shard_rows, part, args.ps)
        where = tf.dynamic_partition(tf.range(tf.size(unique)), part, args.ps)
        return local, where

    def gather(variables, unique):
        local, where = route(unique)
        return tf.dynamic_stitch(where, [tf.gather(v, l) for v, l in zip(variables, local)])

    per_worker = iter(coordinator.create_per_worker_dataset(dataset_fn))
    lr = args.lr

    @tf.function
    def train_step(it):
        label, ids, dense_x = next(it)
        unique, idx = tf.unique(tf.reshape(ids, [-1]))
        rows_u = gather(tables, unique)
        with tf.GradientTape() as tape:
            tape.watch(rows_u)
            logits = forward(rows_u, idx, dense_x)
            loss = tf.reduce_mean(
                tf.nn.sigmoid_cross_entropy_with_logits(labels=label, logits=logits))
        grads = tape.gradient(loss, [rows_u] + dense)
        g_rows = tf.convert_to_tensor(grads[0])  # [unique, width]: repeats summed
        local, where = route(unique)
        for t, a, l, w in zip(tables, table_accs, local, where):
            g = tf.gather(g_rows, w)
            a.scatter_add(tf.IndexedSlices(g * g, l))
            t.scatter_sub(tf.IndexedSlices(lr * g / tf.sqrt(tf.gather(a, l)), l))
        for v, a, g in zip(dense, dense_acc, grads[1:]):
            a.assign_add(g * g)
            v.assign_sub(lr * g / tf.sqrt(a))
        return loss

    total = args.steps * args.workers
    t0 = time.perf_counter()
    last = None
    for i in range(total):
        last = coordinator.schedule(train_step, args=(per_worker,))
        if i == 0:
            t_traced = time.perf_counter()
    coordinator.join()
    t1 = time.perf_counter()
    last_loss = float(last.fetch())

    # Score the held-out file on the chief.
    heldout = tf.data.TFRecordDataset([os.path.join(args.data, "heldout.tfrecord")]).batch(4096).map(parse)
    scores, labels = [], []

    @tf.function
    def score(ids, dense_x):
        unique, idx = tf.unique(tf.reshape(ids, [-1]))
        return tf.sigmoid(forward(gather(tables, unique), idx, dense_x))

    for label, ids, dense_x in heldout:
        scores.append(score(ids, dense_x).numpy().ravel())
        labels.append(label.numpy().ravel())
    scores, labels = np.concatenate(scores), np.concatenate(labels)
    logloss = logloss_of(scores, labels)
    teacher = teacher_of(args.data)
    examples = total * args.batch
    print(json.dumps({
        "peer": "tf_ps_ctr", "tf_version": tf.__version__, "model": "deepfm",
        "ps": args.ps, "workers": args.workers, "batch": args.batch, "steps": total,
        "precision": args.precision,
        "examples": examples, "train_s": round(t1 - t0, 4), "trace_s": round(t_traced - t0, 4),
        "examples_per_sec": round(examples / (t1 - t0), 1),
        "auc": auc_of(scores, labels), "logloss": logloss, "eval_examples": int(len(labels)),
        "teacher_auc": teacher.get("teacher_auc", -1), "last_loss": last_loss,
        "table_rows": rows, "table_width": width, "hidden": args.hidden, "lr": lr,
        "threads": "intra=%d inter=%d" % (INTRA, INTER)}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", default="chief", choices=["chief", "ps", "worker"])
    ap.add_argument("--data", required=True)
    ap.add_argument("--ps", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=200, help="steps per worker")
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--hidden", type=int, nargs="*", default=[400, 400, 400])
    ap.add_argument("--buckets-per-field", type=int, default=65536)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--precision", default="float32", choices=["float32", "mixed_bfloat16"])
    args = ap.parse_args()
    if args.role != "chief":
        serve()
        return
    run_cluster(__file__, ["--data", args.data], args.ps, args.workers,
                lambda spec, procs: chief(args, spec, procs))


if __name__ == "__main__":
    main()
