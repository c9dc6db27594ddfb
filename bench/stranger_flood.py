#!/usr/bin/env python3
"""Strangers at every port of a running job, on loopback, until its tasks are gone.

Reads RUN_DIR/tasks.json (written by troupe launch) for each task's pid, finds every TCP
port the task listens on (/proc/PID/fd against /proc/net/tcp), and holds PER_PORT stranger
connections to each: a third idle, a third dripping a byte every 4 s, a third sending
64 random bytes once. A connection the task closes is opened again a second later, so
the pressure stays. Ports are looked up again every few seconds (a restarted task, an
elastic re-forming). Each task's threads and resident memory are sampled every second.

A port that greets a stranger with BASP is left alone and counted: behind a gate CAF
listens nowhere (net/caf_door.hpp), so under a cluster secret there should be none;
before, each task's CAF had its own loopback port.

Ends with one JSON line: ports by kind, connections opened and closed by the tasks, and
per task its threads and RSS before the flood and at most during it.
"""
import argparse
import json
import os
import random
import resource
import selectors
import socket
import sys
import time


def listening_ports(pid):
    """(host, port) of every TCP socket pid listens on."""
    try:
        inodes = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        return set()
    out = set()
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] != "0A" or f[9] not in inodes:  # 0A: LISTEN
                continue
            addr, port = f[1].split(":")
            port = int(port, 16)
            if v6:
                host = "::1" if addr.endswith("00000000000000000000000001000000") else "::"
                if addr == "0" * 32:
                    host = "127.0.0.1"  # the IPv6 wildcard takes IPv4 too
            else:
                raw = bytes.fromhex(addr)[::-1]
                host = socket.inet_ntoa(raw)
                if host == "0.0.0.0":
                    host = "127.0.0.1"
            out.add((host, port))
    return out


def probe(host, port):
    """What a port says to a stranger who says nothing: door, closed, caf or silent."""
    try:
        s = socket.create_connection((host, port), timeout=1.0)
    except OSError:
        return "unreachable"
    s.settimeout(0.4)
    try:
        first = s.recv(64)
    except socket.timeout:
        first = None
    except OSError:
        first = b""
    finally:
        s.close()
    if first is None:
        return "silent"
    if first == b"":
        return "closed"  # a tunnel: only its own process may use it
    if first[:4] in (b"TRA1", b"TRS1"):
        return "door"
    return "caf"


def task_stats(pid):
    try:
        status = open(f"/proc/{pid}/status").read()
    except OSError:
        return None
    threads = rss = 0
    for line in status.splitlines():
        if line.startswith("Threads:"):
            threads = int(line.split()[1])
        elif line.startswith("VmRSS:"):
            rss = int(line.split()[1]) // 1024
    return threads, rss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--per-port", type=int, default=1000)
    ap.add_argument("--max-seconds", type=float, default=600)
    ap.add_argument("--opens-per-second", type=float, default=2000)
    # Only the gates and tensor channels: a tunnel's refusal ("another process's
    # connection") then can only be of a member, so any such line in the logs is false.
    ap.add_argument("--doors-only", action="store_true")
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    tasks_file = os.path.join(a.run_dir, "tasks.json")
    start = time.monotonic()
    while not os.path.exists(tasks_file) and time.monotonic() - start < 60:
        time.sleep(0.1)

    def read_tasks():
        try:
            return {f"{t['type']}:{t['index']}": t["pid"] for t in json.load(open(tasks_file))}
        except (OSError, ValueError):
            return {}

    tasks = read_tasks()
    baseline = {name: task_stats(pid) for name, pid in tasks.items()}
    peak = {name: list(v) if v else [0, 0] for name, v in baseline.items()}
    kinds = {}
    targets = []  # (host, port)
    seen = set()
    sel = selectors.DefaultSelector()
    slots = []  # per target slot: dict
    opened = closed_by_task = 0
    rng = random.Random(1)

    def scan():
        for name, pid in read_tasks().items():
            tasks[name] = pid
            for hp in listening_ports(pid):
                if hp in seen:
                    continue
                seen.add(hp)
                kind = probe(*hp)
                kinds[kind] = kinds.get(kind, 0) + 1
                if kind in (("door",) if a.doors_only else ("door", "closed", "silent")):
                    targets.append(hp)
                    for i in range(a.per_port):
                        slots.append({"hp": hp, "kind": i % 3, "sock": None, "next": 0.0,
                                      "drip": 0.0})

    def close(slot, by_task):
        nonlocal closed_by_task
        s = slot["sock"]
        if s is not None:
            try:
                sel.unregister(s)
            except (KeyError, ValueError):
                pass
            s.close()
        slot["sock"] = None
        slot["next"] = time.monotonic() + 1.0
        if by_task:
            closed_by_task += 1

    last_scan = last_sample = 0.0
    budget = 0.0
    last_tick = time.monotonic()
    while time.monotonic() - start < a.max_seconds:
        now = time.monotonic()
        alive = {n: p for n, p in tasks.items() if task_stats(p) is not None} if now - last_sample >= 1 else None
        if now - last_scan >= 3:
            scan()
            last_scan = now
        if alive is not None:
            last_sample = now
            if not alive and tasks:
                break
            for name, pid in alive.items():
                st = task_stats(pid)
                if st:
                    p = peak.setdefault(name, [0, 0])
                    p[0], p[1] = max(p[0], st[0]), max(p[1], st[1])
        budget = min(budget + (now - last_tick) * a.opens_per_second, a.opens_per_second)
        last_tick = now
        for slot in slots:
            if budget < 1:
                break
            if slot["sock"] is None and slot["next"] <= now:
                s = socket.socket(socket.AF_INET6 if ":" in slot["hp"][0] else socket.AF_INET)
                s.setblocking(False)
                try:
                    s.connect_ex(slot["hp"])
                except OSError:
                    s.close()
                    slot["next"] = now + 1.0
                    continue
                slot["sock"] = s
                sel.register(s, selectors.EVENT_READ, slot)
                opened += 1
                budget -= 1
                if slot["kind"] == 2:
                    slot["garbage"] = True
            elif slot["sock"] is not None:
                try:
                    if slot.get("garbage"):
                        slot["sock"].send(bytes(rng.getrandbits(8) for _ in range(64)))
                        slot["garbage"] = False
                    elif slot["kind"] == 1 and now >= slot["drip"]:
                        slot["sock"].send(b"T")
                        slot["drip"] = now + 4.0
                except BlockingIOError:
                    pass
                except OSError:
                    close(slot, True)
        for key, _ in sel.select(timeout=0.2):
            slot = key.data
            try:
                if not slot["sock"].recv(4096):
                    close(slot, True)
            except BlockingIOError:
                pass
            except OSError:
                close(slot, True)
    for slot in slots:
        if slot["sock"] is not None:
            slot["sock"].close()
    print(json.dumps({
        "bench": "stranger_flood", "per_port": a.per_port, "ports_by_kind": kinds,
        "ports_flooded": len(targets), "connections_opened": opened,
        "closed_by_tasks": closed_by_task, "seconds": round(time.monotonic() - start, 1),
        "tasks": {n: {"threads_before": (baseline.get(n) or [None, None])[0],
                      "rss_mb_before": (baseline.get(n) or [None, None])[1],
                      "threads_max": peak.get(n, [0, 0])[0],
                      "rss_mb_max": peak.get(n, [0, 0])[1]} for n in tasks}}))


if __name__ == "__main__":
    sys.exit(main())
