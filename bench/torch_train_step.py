#!/usr/bin/python3
# PyTorch counterpart of bench_train_step: the same models, synthetic data, one thread,
# forward + backward + optimizer step; prints one JSON line per configuration.
# Run with Debian's interpreter (python3-torch); prefix
# LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-serial to use OpenBLAS.
import argparse
import json
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def loaded_blas():
    with open("/proc/self/maps") as f:
        libs = {l.split()[-1] for l in f if "blas" in l.split()[-1]}
    return ",".join(sorted(os.path.basename(x) for x in libs)) or "none"


def make(model):
    if model == "mlp":
        m = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
        return m, torch.optim.SGD(m.parameters(), lr=0.1), (784,)
    m = nn.Sequential(nn.Unflatten(1, (1, 28, 28)), nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Flatten(),
                      nn.Linear(26 * 26 * 32, 128), nn.ReLU(), nn.Linear(128, 10))
    return m, torch.optim.RMSprop(m.parameters(), lr=0.001, alpha=0.9, eps=1e-7), (784,)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--batches", default="32,128,512")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=0.5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)
    for model in a.models.split(","):
        for batch in (int(b) for b in a.batches.split(",")):
            m, opt, feat = make(model)
            x = torch.randn(batch, *feat) * 0.3
            y = torch.arange(batch) % 10

            def step():
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(m(x), y).backward()
                opt.step()

            for _ in range(3):
                step()
            rates = []
            limit = a.seconds * (2 if model == "cnn" else 1)
            for _ in range(a.runs):
                n, t0 = 0, time.perf_counter()
                while True:
                    step()
                    n += 1
                    dt = time.perf_counter() - t0
                    if dt >= limit and n >= 3:
                        break
                rates.append(n * batch / dt)
            print(json.dumps({"bench": "torch_train_step", "model": model, "batch": batch,
                              "threads": 1, "blas": loaded_blas(), "runs": a.runs,
                              "examples_per_sec_median": statistics.median(rates)}), flush=True)


if __name__ == "__main__":
    main()
