#!/opt/tfpeer/bin/python
# Click logs with a multi-hot feature for the Wide&Deep benchmark (bench/keras_ctr_models.py
# wide_deep), written as TFRecord files of tf.train.Example by TensorFlow's own
# tf.io.TFRecordWriter (run with the TensorFlow venv, /opt/tfpeer):
#
#   /opt/tfpeer/bin/python bench/wide_deep_data.py --out /tmp/wd --rows 400000
#
# Each example: `cat` [26] int64 (field f's value v, Zipf over --vocab values, as the global
# row f * buckets + v), `history` [H] int64 (between H/4 and H item ids, Zipf over --items,
# ids from 1; 0 pads the rest), `dense` [13] float (normal), `label` [1] float drawn from a
# teacher: logit = b + sum_f w_f[v_f] + 1.5 mean_h t[item_h] + u . dense
#                  + 0.8 tanh(dense_0 * mean_h t[item_h])  (a product the deep part can learn).
# Files: train-0000N-of-0000F.tfrecord, heldout.tfrecord, and teacher.json with the
# teacher's AUC on the held-out rows.
import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from ctr_metrics import auc_of  # noqa: E402

FIELDS, DENSE = 26, 13


def zipf(rng, n, a, size):
    """Values in [0, n) with P(k) ~ 1 / (k + 1)^a."""
    p = 1.0 / np.arange(1, n + 1) ** a
    return rng.choice(n, size=size, p=p / p.sum())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", type=int, default=400000, help="training rows")
    ap.add_argument("--heldout-rows", type=int, default=50000)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--buckets", type=int, default=4096, help="rows of each field's range")
    ap.add_argument("--vocab", type=int, default=1000, help="values of each field")
    ap.add_argument("--items", type=int, default=100000, help="item ids (0 is padding)")
    ap.add_argument("--history", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    import tensorflow as tf

    rng = np.random.default_rng(args.seed)
    n = args.rows + args.heldout_rows
    values = np.stack([zipf(rng, args.vocab, 1.1, n) for _ in range(FIELDS)], axis=1)
    cat = values + np.arange(FIELDS) * args.buckets
    lengths = rng.integers(max(1, args.history // 4), args.history + 1, size=n)
    history = 1 + zipf(rng, args.items - 1, 1.05, (n, args.history))
    history[np.arange(args.history)[None, :] >= lengths[:, None]] = 0
    dense = rng.normal(size=(n, DENSE)).astype(np.float32)
    w = rng.normal(scale=0.25, size=(FIELDS, args.vocab))
    taste = rng.normal(size=args.items)
    taste[0] = 0
    taste_mean = taste[history].sum(axis=1) / lengths
    logit = (-1.2 + w[np.arange(FIELDS), values].sum(axis=1) + 1.5 * taste_mean
             + dense @ rng.normal(scale=0.3, size=DENSE) + 0.8 * np.tanh(dense[:, 0] * taste_mean))
    label = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float32)

    os.makedirs(args.out, exist_ok=True)

    def write(path, rows):
        with tf.io.TFRecordWriter(path) as f:
            for i in rows:
                feature = {
                    "cat": tf.train.Feature(int64_list=tf.train.Int64List(value=cat[i])),
                    "history": tf.train.Feature(int64_list=tf.train.Int64List(value=history[i])),
                    "dense": tf.train.Feature(float_list=tf.train.FloatList(value=dense[i])),
                    "label": tf.train.Feature(float_list=tf.train.FloatList(value=[label[i]])),
                }
                f.write(tf.train.Example(features=tf.train.Features(feature=feature))
                        .SerializeToString())

    held = np.arange(args.heldout_rows)
    write(os.path.join(args.out, "heldout.tfrecord"), held)
    train = np.arange(args.heldout_rows, n)
    for k, part in enumerate(np.array_split(train, args.files)):
        write(os.path.join(args.out, "train-%05d-of-%05d.tfrecord" % (k, args.files)), part)
    teacher = {"teacher_auc": auc_of(logit[held], label[held]), "ctr": float(label.mean()),
               "rows": args.rows, "heldout_rows": args.heldout_rows, "files": args.files,
               "buckets": args.buckets, "vocab": args.vocab, "items": args.items,
               "history": args.history, "seed": args.seed}
    with open(os.path.join(args.out, "teacher.json"), "w") as f:
        json.dump(teacher, f)
    print(json.dumps(dict(teacher, out=args.out)))


if __name__ == "__main__":
    main()
