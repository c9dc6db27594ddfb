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

__all__ = ["FixedShardsPartitioner", "InputContext", "MaxSizePartitioner",
           "MinSizePartitioner", "MultiWorkerMirroredStrategy", "ParameterServerStrategy",
           "Server", "cluster_resolver", "coordinator", "experimental"]


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


class CommunicationImplementation:
    """Which all-reduce a MultiWorkerMirroredStrategy uses (TensorFlow's names)."""
    AUTO = "auto"
    RING = "ring"
    NCCL = "nccl"


class CommunicationOptions:
    """tf.distribute.experimental.CommunicationOptions: the all-reduce, and how long a
    collective waits for the other workers (None: Troupe's 60 s; TensorFlow waits
    forever)."""

    def __init__(self, bytes_per_pack=0, timeout_seconds=None,
                 implementation=CommunicationImplementation.AUTO):
        if implementation not in ("auto", "ring", "nccl"):
            raise ValueError(f"CommunicationOptions: implementation is AUTO, RING or NCCL "
                             f"(got {implementation!r})")
        if bytes_per_pack:
            raise ValueError("CommunicationOptions: bytes_per_pack is Troupe's own "
                             "(4 MiB buckets); it is not set from Python")
        self.implementation = implementation
        self.timeout_seconds = timeout_seconds


class experimental:  # noqa: N801  (TensorFlow's namespace: tf.distribute.experimental)
    class partitioners:  # noqa: N801
        MinSizePartitioner = MinSizePartitioner
        MaxSizePartitioner = MaxSizePartitioner
        FixedShardsPartitioner = FixedShardsPartitioner

    CommunicationImplementation = CommunicationImplementation
    CommunicationOptions = CommunicationOptions


def _cluster_dict(cluster):
    if isinstance(cluster, ClusterSpec):
        return cluster.as_dict()
    if isinstance(cluster, dict):
        return {str(k): [str(a) for a in v] for k, v in cluster.items()}
    raise TypeError(f"a cluster is a ClusterSpec or a dict of jobs (got {type(cluster).__name__})")


class Server:
    """A PS or worker task of the cluster (tf.distribute.Server): ``join()`` serves it
    until the chief ends the job, then returns. Ctrl-C ends serving there (the chief sees
    a lost task) and raises KeyboardInterrupt."""

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


class _Strategy:
    """What the strategies share: scope(), where the models made adopt the strategy."""

    @contextlib.contextmanager
    def scope(self):
        previous = _current_strategy()
        _scope.strategy = self
        try:
            yield self
        finally:
            _scope.strategy = previous

    def _adopt(self, model):
        pass


class ParameterServerStrategy(_Strategy):
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

    def _adopt(self, model):
        self._models.add(model)

    def shutdown(self):
        """Ends the job: every PS and worker task stops serving (their Server.join()
        returns). Called at exit."""
        for model in list(self._models):
            model._core.shutdown_cluster()
        self._models = weakref.WeakSet()


class InputContext:
    """Where a dataset function runs (tf.distribute.InputContext): the input pipelines,
    this one's index, and the replicas a global batch is split among."""

    def __init__(self, num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1):
        self.num_input_pipelines = int(num_input_pipelines)
        self.input_pipeline_id = int(input_pipeline_id)
        self.num_replicas_in_sync = int(num_replicas_in_sync)

    def get_per_replica_batch_size(self, global_batch_size):
        if global_batch_size % self.num_replicas_in_sync != 0:
            raise ValueError(f"the global batch size ({global_batch_size}) is not divisible "
                             f"by num_replicas_in_sync ({self.num_replicas_in_sync})")
        return global_batch_size // self.num_replicas_in_sync

    def __repr__(self):
        return (f"InputContext(num_input_pipelines={self.num_input_pipelines}, "
                f"input_pipeline_id={self.input_pipeline_id}, "
                f"num_replicas_in_sync={self.num_replicas_in_sync})")


class DistributedDataset:
    """What distribute_datasets_from_function returns: ``fn`` of an InputContext, called on
    this worker when fit() starts and again whenever the workers change (elastic), giving
    this replica's troupe.data dataset (its own shard, its per-replica batch)."""

    def __init__(self, fn, strategy):
        self._fn = fn
        self._strategy = strategy

    def _spec(self, label_names, default_batch=32, input_names=()):
        def make(num_input_pipelines, input_pipeline_id, num_replicas_in_sync):
            ds = self._fn(InputContext(num_input_pipelines, input_pipeline_id,
                                       num_replicas_in_sync))
            return ds._spec(label_names, default_batch, input_names)

        # For fit()'s checks, the dataset as this worker sees it now.
        first = self._fn(self._strategy._input_context())
        spec = first._spec(label_names, default_batch, input_names)
        return {"kind": "function", "fn": make, "repeat": spec["repeat"],
                "batch": spec["batch"]}

    @property
    def element_spec_batch_size(self):
        return None


class MultiWorkerMirroredStrategy(_Strategy):
    """Synchronous training on every worker (tf.distribute.MultiWorkerMirroredStrategy):
    the script runs on each chief and worker task of TF_CONFIG's cluster; a Keras model
    made in ``scope()`` is a replica on each, gradients all-reduced every step, and fit()
    on every worker trains them together. A dataset's batch is the global batch: each
    worker takes its share of it and its shard of the examples. Without TF_CONFIG, one
    replica in this process.

    ``elastic`` (Troupe's, beyond TensorFlow): a lost worker is left behind and the others
    carry on; a worker that starts again (``troupe launch --restart-failed``) runs the
    script again and rejoins with the others' weights, epoch and step. Without it a lost
    worker ends fit() on every worker with an UnavailableError naming it."""

    def __init__(self, cluster_resolver=None, communication_options=None, *, elastic=False,
                 min_workers=1, connect_timeout_seconds=30.0):
        import os

        if cluster_resolver is None and not (os.environ.get("TF_CONFIG")
                                             or os.environ.get("SLURM_PROCID")):
            self._resolver, self._core = None, None
            return
        self._resolver = cluster_resolver or _cluster_resolver_module().TFConfigClusterResolver()
        options = communication_options or CommunicationOptions()
        self._core = _troupe.MirroredStrategy(
            _cluster_dict(self._resolver.cluster_spec()), self._resolver.task_type,
            self._resolver.task_id,
            {"communication": options.implementation, "elastic": bool(elastic),
             "min_workers": int(min_workers),
             "timeout_s": float(options.timeout_seconds or 60.0),
             "connect_timeout_s": float(connect_timeout_seconds)})

    @property
    def num_replicas_in_sync(self):
        return self._core.num_replicas_in_sync if self._core is not None else 1

    @property
    def cluster_resolver(self):
        return self._resolver

    @property
    def is_chief(self):
        """Whether this worker writes what the job keeps (the chief, or worker 0)."""
        return self._core.is_chief if self._core is not None else True

    def _input_context(self):
        if self._core is None:
            return InputContext()
        n = self._core.num_replicas_in_sync
        return InputContext(n, self._core.worker_index, n)

    def stats(self):
        """Re-formings of the ring, workers lost and joined, steps run again."""
        return self._core.stats() if self._core is not None else {}

    def distribute_datasets_from_function(self, dataset_fn, options=None):
        """``dataset_fn(input_context)`` returns this replica's troupe.data dataset: its
        shard (``input_context.input_pipeline_id`` of ``num_input_pipelines``) batched by
        ``get_per_replica_batch_size``. Called again whenever the workers change."""
        return DistributedDataset(dataset_fn, self)

    def experimental_distribute_dataset(self, dataset, options=None):
        """The dataset itself: fit() shards it among the workers and splits its (global)
        batch."""
        return dataset


def _cluster_resolver_module():
    return cluster_resolver
