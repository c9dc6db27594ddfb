"""A TensorFlow 2 parameter-server cluster as real processes on 127.0.0.1, for the peers that
run TensorFlow's ParameterServerStrategy (bench/tf_ps_ctr.py, bench/tf_keras_ps.py).

The chief (the calling script) starts --ps ps tasks and --workers worker tasks: the same
script again with `--role ps|worker` and its own TF_CONFIG, each a tf.distribute.Server. Every
process it starts dies with it (PR_SET_PDEATHSIG) and is killed by its pid at the end.
Threads: intra-op 1, inter-op 2 (1 deadlocks the strategy); TFPEER_INTRA / TFPEER_INTER
override.
"""

import json
import os
import signal
import socket
import subprocess
import sys

INTRA = int(os.environ.get("TFPEER_INTRA", "1"))
INTER = int(os.environ.get("TFPEER_INTER", "2"))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def parent_death_kills_me():
    import ctypes
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def threads_config(tf):
    tf.config.threading.set_intra_op_parallelism_threads(INTRA)
    tf.config.threading.set_inter_op_parallelism_threads(INTER)


def serve():
    """A ps or worker task: this process's TF_CONFIG names it; runs until killed."""
    import tensorflow as tf
    threads_config(tf)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=INTRA,
                                      inter_op_parallelism_threads=INTER)
    tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                         task_index=resolver.task_id, protocol="grpc", config=config,
                         start=True).join()


def run_cluster(script, task_args, ps, workers, chief, extra_env=None):
    """Starts the tasks (`script --role ps|worker` + task_args), makes this process the chief
    (its TF_CONFIG and thread settings in os.environ), calls chief(spec, procs), then ends
    every task it started and leaves without TensorFlow's exit-time cleanup."""
    spec = {"chief": ["127.0.0.1:%d" % free_port()],
            "ps": ["127.0.0.1:%d" % free_port() for _ in range(ps)],
            "worker": ["127.0.0.1:%d" % free_port() for _ in range(workers)]}
    env = dict(os.environ, TF_NUM_INTRAOP_THREADS=str(INTRA), TF_NUM_INTEROP_THREADS=str(INTER),
               TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
               CUDA_VISIBLE_DEVICES="", **(extra_env or {}))
    procs = []
    for typ in ("ps", "worker"):
        for i in range(len(spec[typ])):
            e = dict(env, TF_CONFIG=json.dumps({"cluster": spec, "task": {"type": typ, "index": i}}))
            procs.append(subprocess.Popen(
                [sys.executable, os.path.abspath(script), "--role", typ] + list(task_args),
                env=e, stdin=subprocess.DEVNULL, preexec_fn=parent_death_kills_me))
    os.environ.update(env)
    os.environ["TF_CONFIG"] = json.dumps({"cluster": spec, "task": {"type": "chief", "index": 0}})
    try:
        chief(spec, procs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()  # by the pid this script started
            p.wait()
    sys.stdout.flush()
    os._exit(0)  # skip TF's exit-time cleanup against the stopped servers
