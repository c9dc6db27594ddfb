#!/usr/bin/python3
# Reference for ctr_ps: the same DeepFM in PyTorch, one process, one thread, on the same
# ctr_datagen Criteo text files (hashed with the same 64-bit FNV-1a into the same buckets,
# so the ids match ctr_ps's). Embedding(sparse=True) + Adagrad: only the batch's rows are
# updated, as on Troupe's PS. Prints one JSON line: examples_per_sec (training loop only,
# data already in memory), auc and logloss on heldout.txt, teacher_auc.
# --precision bf16 runs the forward pass under torch.autocast(device_type="cpu",
# dtype=torch.bfloat16) (Linear layers in bf16, parameters and optimizer float32);
# --steps ends training after that many steps; --threads sets torch's intra-op threads.
#
#   /usr/bin/python3 bench/torch_deepfm.py --data /tmp/ctr --batch 512 --epochs 4 \
#       --dim 8 --hidden 64 64 --buckets-per-field 4096 --lr 0.2
import argparse
import glob
import json
import math
import os
import time

import numpy as np
import torch

from ctr_metrics import auc_of, logloss_of, teacher_of

FIELDS, DENSE = 26, 13


def fnv1a(s, buckets, memo={}):
    key = (s, buckets)
    h = memo.get(key)
    if h is None:
        x = 0xcbf29ce484222325
        for c in s.encode():
            x ^= c
            x = (x * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
        h = memo[key] = x % buckets
    return h


def read_criteo(paths, buckets):
    labels, ids, dense = [], [], []
    offsets = np.arange(FIELDS, dtype=np.int64) * buckets
    for path in paths:
        with open(path) as f:
            for line in f:
                cols = line.rstrip("\n").split("\t")
                labels.append(float(cols[0]))
                dense.append([math.log1p(max(int(c), 0)) if c else 0.0 for c in cols[1:14]])
                ids.append([fnv1a(c, buckets) for c in cols[14:40]])
    return (np.array(labels, np.float32), np.array(ids, np.int64) + offsets,
            np.array(dense, np.float32))


class DeepFM(torch.nn.Module):
    def __init__(self, rows, dim, hidden):
        super().__init__()
        self.dim = dim
        self.table = torch.nn.Embedding(rows, 1 + dim, sparse=True)
        torch.nn.init.uniform_(self.table.weight, -0.05, 0.05)
        self.bias = torch.nn.Parameter(torch.zeros(1))
        self.dense_w = torch.nn.Linear(DENSE, 1, bias=False)
        layers, width = [], FIELDS * dim + DENSE
        for h in hidden:
            layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
            width = h
        layers.append(torch.nn.Linear(width, 1))
        self.dnn = torch.nn.Sequential(*layers)

    def forward(self, ids, dense):
        r = self.table(ids)                    # [B, F, 1 + k]
        w, v = r[:, :, 0], r[:, :, 1:]
        s = v.sum(1)
        fm = 0.5 * (s * s - (v * v).sum(1)).sum(1, keepdim=True)
        h = torch.cat([v.reshape(v.shape[0], -1), dense], 1)
        return self.bias + w.sum(1, keepdim=True) + self.dense_w(dense) + fm + self.dnn(h)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--hidden", type=int, nargs="*", default=[64, 64])
    ap.add_argument("--buckets-per-field", type=int, default=4096)
    ap.add_argument("--lr", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--precision", choices=["float32", "bf16"], default="float32")
    ap.add_argument("--steps", type=int, default=0, help="0: every step of --epochs")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    bf16 = args.precision == "bf16"
    torch.manual_seed(args.seed)
    t_read = time.perf_counter()
    files = sorted(glob.glob(os.path.join(args.data, "train-*.txt")))
    y, ids, dense = read_criteo(files, args.buckets_per_field)
    hy, hids, hdense = read_criteo([os.path.join(args.data, "heldout.txt")], args.buckets_per_field)
    read_s = time.perf_counter() - t_read
    y, ids, dense = torch.from_numpy(y)[:, None], torch.from_numpy(ids), torch.from_numpy(dense)
    model = DeepFM(FIELDS * args.buckets_per_field, args.dim, args.hidden)
    opt = torch.optim.Adagrad(model.parameters(), lr=args.lr, initial_accumulator_value=0.1)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    n = len(y) // args.batch * args.batch
    steps = 0
    t0 = time.perf_counter()
    limit = args.steps if args.steps > 0 else args.epochs * (n // args.batch)
    while steps < limit:
        for b in range(0, n, args.batch):
            if steps == limit:
                break
            opt.zero_grad()
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = model(ids[b:b + args.batch], dense[b:b + args.batch])
            loss = loss_fn(logits.float(), y[b:b + args.batch])
            loss.backward()
            opt.step()
            steps += 1
    train_s = time.perf_counter() - t0
    with torch.no_grad(), torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=bf16):
        p = torch.sigmoid(model(torch.from_numpy(hids), torch.from_numpy(hdense)).float())
    p = p.numpy().ravel()
    logloss = logloss_of(p, hy)
    teacher = teacher_of(args.data)
    print(json.dumps({"peer": "torch_deepfm", "torch_version": torch.__version__,
                      "threads": args.threads, "precision": args.precision,
                      "batch": args.batch, "steps": steps, "examples": steps * args.batch,
                      "train_s": round(train_s, 3), "read_s": round(read_s, 3),
                      "examples_per_sec": round(steps * args.batch / train_s, 1),
                      "auc": auc_of(p, hy), "logloss": logloss,
                      "teacher_auc": teacher.get("teacher_auc", -1)}), flush=True)


if __name__ == "__main__":
    main()
