"""TensorFlow 2.21's ClusterCoordinator dispatching trivial closures, the peer of bench_ps's
`idle` and `closures` sections (bench/scale_workers.sh, issue 42): --ps PS tasks and
--workers N worker tasks as real processes on 127.0.0.1 (bench/tf_cluster.py), this
process the chief. The step reads nothing and returns a constant, as bench_ps's `noop`.

Prints one JSON line: the chief's share of a core over --idle-seconds with every worker
connected and nothing scheduled; then, over --rounds rounds, closures/s from the first
schedule() to join() returning (`no_result_per_sec_median`: TensorFlow's schedule always
makes a RemoteValue; none is fetched), closures/s with each RemoteValue fetched, and the
chief process's CPU-microseconds per closure over the join rounds; the chief's peak RSS
and the workers' RSS. A cluster that cannot start (memory, threads) is reported as an
error line naming what failed.
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tf_cluster import run_cluster, serve, threads_config  # noqa: E402


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def rss_mb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def chief(args, spec, procs):
    import tensorflow as tf
    threads_config(tf)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    t_start = time.monotonic()
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

    @tf.function
    def noop():
        return tf.constant(0)

    # Every worker connected: one closure per worker, fetched.
    warm = [coordinator.schedule(noop) for _ in range(len(spec["worker"]))]
    coordinator.join()
    for v in warm:
        v.fetch()
    startup_s = time.monotonic() - t_start
    cpu0, t0 = cpu_seconds(), time.monotonic()
    time.sleep(args.idle_seconds)  # the measurement itself: nothing to wait on
    idle = (cpu_seconds() - cpu0) / (time.monotonic() - t0)
    no_result, fetched, cpu_us = [], [], []
    for _ in range(args.rounds):
        cpu0, t0 = cpu_seconds(), time.monotonic()
        for _ in range(args.closures):
            coordinator.schedule(noop)
        coordinator.join()
        no_result.append(args.closures / (time.monotonic() - t0))
        cpu_us.append(1e6 * (cpu_seconds() - cpu0) / args.closures)
        t0 = time.monotonic()
        values = [coordinator.schedule(noop) for _ in range(args.closures)]
        for v in values:
            v.fetch()
        fetched.append(args.closures / (time.monotonic() - t0))
    workers_rss = [rss_mb(p.pid) for p in procs[len(spec["ps"]):]]
    workers_rss = [r for r in workers_rss if r is not None]
    print(json.dumps({
        "bench": "tf_dispatch", "ok": True, "workers": len(spec["worker"]), "ps": len(spec["ps"]),
        "closures": args.closures, "rounds": args.rounds, "startup_s": startup_s,
        "chief_core_fraction": idle,
        "no_result_per_sec_median": statistics.median(no_result),
        "fetched_per_sec_median": statistics.median(fetched),
        "chief_cpu_us_per_closure_median": statistics.median(cpu_us),
        "chief_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "worker_rss_mb_median": statistics.median(workers_rss) if workers_rss else None}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", default="chief", choices=["chief", "ps", "worker"])
    ap.add_argument("--ps", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--closures", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--idle-seconds", type=float, default=5.0)
    args = ap.parse_args()
    if args.role != "chief":
        serve()
        return
    run_cluster(__file__, [], args.ps, args.workers, lambda spec, procs: guarded(args, spec, procs))


def guarded(args, spec, procs):
    try:
        chief(args, spec, procs)
    except Exception as e:  # a cluster that could not start or run: say what failed
        print(json.dumps({"bench": "tf_dispatch", "ok": False, "workers": args.workers,
                          "error": "%s: %s" % (type(e).__name__, e)}))


if __name__ == "__main__":
    main()
