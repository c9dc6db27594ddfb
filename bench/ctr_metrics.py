# What the CTR peer scripts (tf_ps_ctr.py, torch_deepfm.py) share: AUC from ranks, log loss,
# and the teacher's figures of a ctr_datagen directory. Plain numpy, for either Python.
import json
import os

import numpy as np


def auc_of(scores, labels):
    """P(score of a random click > score of a random non-click), ties counting one half."""
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    s = scores[order]
    i = 0
    while i < len(s):  # average ranks over ties
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1
        i = j + 1
    pos = labels > 0.5
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def logloss_of(probabilities, labels):
    p = np.clip(probabilities, 1e-7, 1 - 1e-7)
    return float(-(labels * np.log(p) + (1 - labels) * np.log(1 - p)).mean())


def teacher_of(data_dir):
    """teacher.json of a ctr_datagen directory ({} when absent)."""
    try:
        with open(os.path.join(data_dir, "teacher.json")) as f:
            return json.load(f)
    except OSError:
        return {}
