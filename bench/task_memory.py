#!/usr/bin/env python3
"""Peak memory of each task of a job: runs a `troupe launch` command line, reads every
process's TF_CONFIG task, peak resident set (VmHWM, /proc/PID/status) and private memory
(Private_Clean + Private_Dirty, /proc/PID/smaps_rollup: what the process alone costs the
machine, its share of no library) while it runs, and prints one JSON line per task, then
one line of the job's result and the largest peaks of each role.

    bench/task_memory.py [--label NAME] -- build/bin/troupe launch --ps 2 --workers 2 -- \
        build/bin/troupe train --model big.keras --data ... --steps 20

VmHWM is the kernel's high-water mark, so polling (every 0.1 s) misses no peak reached
before the process's last poll; a peak in a task's last 0.1 s of life can be missed.
"""

import argparse
import json
import os
import subprocess
import sys
import time


def task_of(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return None
    for e in env:
        if e.startswith(b"TF_CONFIG="):
            try:
                t = json.loads(e[len("TF_CONFIG="):])["task"]
                return f"{t['type']}:{t['index']}"
            except (ValueError, KeyError):
                return None
    return None


def peak_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def private_kb(pid):
    try:
        total = 0
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith(("Private_Clean:", "Private_Dirty:")):
                    total += int(line.split()[1])
        return total
    except (OSError, ValueError, IndexError):
        return None


def descendants(root):
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default="")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("give the job's command after --")
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    peaks, private, pids = {}, {}, {}
    while job.poll() is None:
        for pid in descendants(job.pid):
            task = pids.get(pid) or task_of(pid)
            if task is None:
                continue
            pids[pid] = task
            kb = peak_kb(pid)
            if kb is not None:
                peaks[task] = max(peaks.get(task, 0), kb)
            kb = private_kb(pid)
            if kb is not None:
                private[task] = max(private.get(task, 0), kb)
        time.sleep(0.1)
    out = job.stdout.read().strip().splitlines()
    result = json.loads(out[-1]) if out else {}
    for task in sorted(peaks):
        print(json.dumps({"bench": "task_memory", "label": args.label, "task": task,
                          "peak_rss_mb": round(peaks[task] / 1024, 1),
                          "peak_private_mb": round(private.get(task, 0) / 1024, 1)}))

    def by_role(values):
        roles = {}
        for task, kb in values.items():
            role = task.split(":")[0]
            roles[role] = max(roles.get(role, 0), round(kb / 1024, 1))
        return roles

    chief = result.get("chief", {}) if isinstance(result, dict) else {}
    print(json.dumps({"bench": "task_memory", "label": args.label, "ok": job.returncode == 0,
                      "chief_ok": chief.get("ok"), "peak_rss_mb_by_role": by_role(peaks),
                      "peak_private_mb_by_role": by_role(private)}))
    return job.returncode


if __name__ == "__main__":
    sys.exit(main())
