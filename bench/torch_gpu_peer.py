#!/usr/bin/env python3
# PyTorch on the same GPU as bench_gpu's train_step figures: the MLP 784-128-10 and the
# tutorial CNN (a training step: forward, backward, optimizer), DeepFM dim 16 with a
# 400-400-400 MLP over the batch's unique rows (forward + backward), synthetic data, same
# batches; eager and torch.compile, float32, TF32 and bf16 autocast. One JSON line per
# configuration (examples_per_sec, median of --runs windows), then a summary.
#
#   python3 bench/torch_gpu_peer.py --device cuda --runs 5
#   python3 bench/torch_gpu_peer.py --device cpu --runs 1 --seconds 0.2   # a smoke run
#
# bench/compare_gpu.sh alternates it with bench_gpu in one run.
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

FIELDS, DENSE, DIM = 26, 13, 16


class DeepFM(nn.Module):
    """The embedding part over the batch's unique rows [u, 1 + DIM] (pulled from the PS
    in ctr_ps), then the MLP; as Troupe's built-in DeepFM."""

    def __init__(self, hidden):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(1))
        self.dense_w = nn.Linear(DENSE, 1, bias=False)
        layers, width = [], FIELDS * DIM + DENSE
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, rows, index, values, dense):
        r = rows[index]                              # [n, F, 1 + DIM]
        lin = (r[..., 0] * values).sum(1)
        e = r[..., 1:] * values.unsqueeze(-1)        # [n, F, DIM]
        s = e.sum(1)
        fm = 0.5 * ((s * s).sum(1) - (e * e).sum((1, 2)))
        deep = self.mlp(torch.cat([e.flatten(1), dense], 1)).squeeze(1)
        return self.bias + lin + self.dense_w(dense).squeeze(1) + fm + deep


def classifier(name):
    if name == "mlp":
        m = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
        return m, lambda p: torch.optim.SGD(p, lr=0.1)
    m = nn.Sequential(nn.Unflatten(1, (1, 28, 28)), nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Flatten(),
                      nn.Linear(26 * 26 * 32, 128), nn.ReLU(), nn.Linear(128, 10))
    return m, lambda p: torch.optim.RMSprop(p, lr=0.001, alpha=0.9, eps=1e-7)


def timed(step, device, runs, seconds):
    step()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    per = []
    for _ in range(runs):
        calls, t0 = 0, time.perf_counter()
        while True:
            step()
            calls += 1
            if calls % 8 == 0 or calls < 3:
                sync()
                if time.perf_counter() - t0 >= seconds and calls >= 3:
                    break
        sync()
        per.append((time.perf_counter() - t0) / calls)
    return statistics.median(per)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=0.5)
    ap.add_argument("--precisions", nargs="+", default=["float32", "tf32", "mixed_bfloat16"])
    ap.add_argument("--modes", nargs="+", default=["eager", "compile"])
    ap.add_argument("--deepfm-batches", nargs="+", type=int, default=[1024, 4096, 16384])
    a = ap.parse_args()
    device = torch.device(a.device)
    torch.manual_seed(1)
    results = []

    def emit(j):
        print(json.dumps(j), flush=True)
        results.append(j)

    for precision in a.precisions:
        if device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
            torch.backends.cudnn.allow_tf32 = precision == "tf32"
        autocast = precision == "mixed_bfloat16"
        for mode in a.modes:
            wrap = (lambda f: torch.compile(f)) if mode == "compile" else (lambda f: f)
            for name in ("mlp", "cnn"):
                m, make_opt = classifier(name)
                m = m.to(device)
                opt = make_opt(m.parameters())
                x = torch.randn(128, 784, device=device) * 0.3
                y = torch.arange(128, device=device) % 10
                fwd = wrap(m)

                def step():
                    opt.zero_grad(set_to_none=True)
                    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                        loss = F.cross_entropy(fwd(x), y)
                    loss.backward()
                    opt.step()

                sec = timed(step, device, a.runs, a.seconds)
                emit({"bench": "torch_train_step", "model": name, "batch": 128, "mode": mode,
                      "precision": precision, "examples_per_sec": 128 / sec})
            for batch in a.deepfm_batches:
                model = DeepFM([400, 400, 400]).to(device)
                fwd = wrap(model)
                ids = torch.randint(0, 100000, (batch, FIELDS), device=device) + \
                    torch.arange(FIELDS, device=device) * 100000
                unique, index = torch.unique(ids, return_inverse=True)
                rows = (torch.rand(unique.numel(), 1 + DIM, device=device) - 0.5) * 0.1
                rows.requires_grad_(True)
                values = torch.ones(batch, FIELDS, device=device)
                dense = torch.rand(batch, DENSE, device=device)
                labels = (torch.rand(batch, device=device) > 0.5).float()

                def step():
                    model.zero_grad(set_to_none=True)
                    rows.grad = None
                    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                        z = fwd(rows, index, values, dense)
                    F.binary_cross_entropy_with_logits(z.float(), labels).backward()

                sec = timed(step, device, a.runs, a.seconds)
                emit({"bench": "torch_train_step", "model": "deepfm", "batch": batch,
                      "mode": mode, "precision": precision, "examples_per_sec": batch / sec})
    print(json.dumps({"bench": "torch_gpu_summary", "device": str(device),
                      "device_name": torch.cuda.get_device_name(0) if device.type == "cuda"
                      else "cpu", "torch": torch.__version__, "results": results}), flush=True)


if __name__ == "__main__":
    main()
