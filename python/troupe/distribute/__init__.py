"""``tf.distribute``'s shape on Troupe's runtime: a TF_CONFIG cluster, a server for each PS
and worker task, and ParameterServerStrategy for the chief.

    resolver = troupe.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("worker", "ps"):
        troupe.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                 task_index=resolver.task_id).join()   # never returns here
    strategy = troupe.distribute.ParameterServerStrategy(
        resolver, variable_partitioner=MinSizePartitioner(min_shard_bytes=256 << 10,
                                                          max_shards=2))
    with strategy.scope():
        model = troupe.keras.load_model("ctr.keras")
    model.fit(troupe.data.TFRecordDataset(files).shuffle(10_000).batch(512).repeat(),
              epochs=3, steps_per_epoch=200)

A PS or worker task runs the C++ node in Server.join() and never runs user Python again:
the model reaches it from the chief as data, with its data's description.
"""

import atexit
import contextlib
import threading
import weakref

from troupe import _troupe
from troupe.distribute import cluster_resolver, coordinator  # noqa: F401
from troupe.distribute.cluster_resolver import ClusterSpec

__all__ = ["FixedShardsPartitioner", "MaxSizePartitioner", "MinSizePartitioner",
           "ParameterServerStrategy", "Server", "cluster_resolver", "coordinator",
           "experimental"]


class MinSizePartitioner:
    """Shards of at least ``min_shard_bytes``, at most ``max_shards`` of them (TensorFlow's
    tf.distribute.experimental.partitioners.MinSizePartitioner)."""

    def __init__(self, min_shard_bytes=256 << 10, max_shards=1):
        self._spec = {"type": "min_size", "min_shard_bytes": int(min_shard_bytes),
                      "max_shards": int(max_shards)}


class MaxSizePartitioner:
    """Shards of at most ``max_shard_bytes``, at most ``max_shards`` of them (0: no
    bound)."""

    def __init__(self, max_shard_bytes, max_shards=None):
        self._spec = {"type": "max_size", "max_shard_bytes": int(max_shard_bytes),
                      "max_shards": int(max_shards or 0)}


class FixedShardsPartitioner:
    """Every variable in ``num_shards`` shards (fewer where it has fewer rows)."""

    def __init__(self, num_shards):
        self._spec = {"type": "fixed", "num_shards": int(num_shards)}


class experimental:  # noqa: N801  (TensorFlow's namespace: tf.distribute.experimental)
    class partitioners:  # noqa: N801
        MinSizePartitioner = MinSizePartitioner
        MaxSizePartitioner = MaxSizePartitioner
        FixedShardsPartitioner = FixedShardsPartitioner


def _cluster_dict(cluster):
    if isinstance(cluster, ClusterSpec):
        return cluster.as_dict()
    if isinstance(cluster, dict):
        return {str(k): [str(a) for a in v] for k, v in cluster.items()}
    raise TypeError(f"a cluster is a ClusterSpec or a dict of jobs (got {type(cluster).__name__})")


class Server:
    """A PS or worker task of the cluster (tf.distribute.Server): ``join()`` serves it
    until the chief ends the job, then returns."""

    def __init__(self, server_or_cluster_def, job_name=None, task_index=None, protocol=None,
                 start=True):
        if job_name not in ("ps", "worker"):
            raise ValueError(f"Server: job_name is 'ps' or 'worker' (got {job_name!r})")
        self._cluster = _cluster_dict(server_or_cluster_def)
        self._job = job_name
        self._index = int(task_index or 0)

    def join(self):
        _troupe.serve(self._cluster, self._job, self._index)

    def start(self):
        """Serving starts in join() (a task serves on its own thread of control)."""


_scope = threading.local()


def _current_strategy():
    return getattr(_scope, "strategy", None)


class ParameterServerStrategy:
    """The chief's strategy (tf.distribute.ParameterServerStrategy): connects to every PS
    task when made. Keras models made in ``scope()`` keep their variables on the PS tasks
    (each Embedding's table sharded by ``variable_partitioner``); their fit() runs every
    step as a closure on some worker, and survives lost workers."""

    def __init__(self, cluster_resolver, variable_partitioner=None, ps_replicas=1):
        self._resolver = cluster_resolver
        spec = variable_partitioner._spec if variable_partitioner is not None else None
        self._core = _troupe.PsStrategy(_cluster_dict(cluster_resolver.cluster_spec()),
                                        cluster_resolver.task_type, cluster_resolver.task_id,
                                        spec, int(ps_replicas))
        self._models = weakref.WeakSet()
        atexit.register(self.shutdown)

    @property
    def num_workers(self):
        return self._core.num_workers

    @property
    def cluster_resolver(self):
        return self._resolver

    @contextlib.contextmanager
    def scope(self):
        previous = _current_strategy()
        _scope.strategy = self
        try:
            yield self
        finally:
            _scope.strategy = previous

    def _adopt(self, model):
        self._models.add(model)

    def shutdown(self):
        """Ends the job: every PS and worker task stops serving (their Server.join()
        returns). Called at exit."""
        for model in list(self._models):
            model._core.shutdown_cluster()
        self._models = weakref.WeakSet()
