# What the compare_*.sh scripts that alternate Troupe with a peer share: their runs, one
# JSON object per line ({"side": ..., "run": <the program's last JSON line>, ...}), and a
# field of a run's result (under "chief" for troupe launch's line, else the line itself).
import json


def read_runs(path):
    return [json.loads(line) for line in open(path)]


def field(r, k):
    run = r["run"]
    return (run["chief"] if "chief" in run else run)[k]
