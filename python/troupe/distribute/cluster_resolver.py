"""TensorFlow's TF_CONFIG cluster resolver (tf.distribute.cluster_resolver)."""

from troupe import _troupe


class ClusterSpec:
    """The jobs of a cluster and each task's address (tf.train.ClusterSpec)."""

    def __init__(self, cluster):
        self._jobs = {str(k): [str(a) for a in v] for k, v in dict(cluster).items()}

    def as_dict(self):
        return {k: list(v) for k, v in self._jobs.items()}

    @property
    def jobs(self):
        return sorted(self._jobs)

    def num_tasks(self, job_name):
        return len(self._jobs.get(job_name, []))

    def task_address(self, job_name, task_index):
        return self._jobs[job_name][task_index]

    def __repr__(self):
        return f"ClusterSpec({self._jobs})"


class TFConfigClusterResolver:
    """The cluster and this process's task from the TF_CONFIG environment variable (or a
    Slurm step's). A missing or malformed TF_CONFIG is an InvalidArgumentError saying
    what is wrong."""

    def __init__(self):
        r = _troupe.resolve_cluster()
        self._spec = ClusterSpec(r["cluster"])
        self.task_type = r["task_type"]
        self.task_id = r["task_id"]
        self.rpc_layer = r["rpc_layer"]

    def cluster_spec(self):
        return self._spec

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None):
        return {}
