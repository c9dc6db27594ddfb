"""tf.distribute.coordinator's ClusterCoordinator on Troupe: the chief schedules a model's
registered steps as closures on the workers and joins them; lost workers' closures run
again elsewhere.

    coordinator = troupe.distribute.coordinator.ClusterCoordinator(strategy)
    per_worker_iterator = iter(coordinator.create_per_worker_dataset(dataset))
    for _ in range(steps):
        result = coordinator.schedule(model.train_step, args=(per_worker_iterator,))
    coordinator.join()
    result.fetch()            # {"loss": ..., "accuracy": ...} of that closure's last step

A Python function cannot travel to the workers (they run C++ only, and never user
Python): schedule() takes a model's registered steps (``model.train_step``,
``model.evaluate_step``) and says so for anything else. The tutorial's inline evaluation:

    results = [coordinator.schedule(model.evaluate_step, args=(per_worker_eval_iterator,))
               for _ in range(eval_steps)]
    coordinator.join()
    merge_results(results)    # {"loss": ..., "accuracy": ...} over every batch scored
"""

from troupe import errors
from troupe.data import Dataset


class RemoteValue:
    """A scheduled closure's result (tf.distribute.experimental.coordinator.RemoteValue):
    ``fetch()`` waits for it and returns its logs, or raises its error (a closure
    cancelled by an earlier error: CancelledError). Ctrl-C while it waits raises
    KeyboardInterrupt; the closure stays scheduled."""

    def __init__(self, model, value):
        self._model = model
        self._value = value

    def fetch(self):
        return self._model._core.logs(self._value.fetch())

    def get(self):
        return self.fetch()

    def ready(self):
        return self._value.ready()


class PerWorkerDataset:
    """A dataset every worker iterates over its own share of (made for a model when a step
    of it is first scheduled with it: the model travels with the data)."""

    def __init__(self, coordinator, dataset):
        self._coordinator = coordinator
        self._dataset = dataset
        self._made = {}  # id(model) -> the C++ per-worker dataset

    def __iter__(self):
        return PerWorkerIterator(self)

    def _for(self, model):
        made = self._made.get(id(model))
        if made is None:
            made = model._core.per_worker_dataset(
                self._dataset.repeat()._spec(model.label_names),
                self._coordinator.strategy._core)
            self._made[id(model)] = made
        return made


class PerWorkerIterator:
    """Every worker's iterator over its share: an argument of schedule(), read by the
    workers, never here."""

    def __init__(self, per_worker_dataset):
        self._per_worker_dataset = per_worker_dataset

    def __iter__(self):
        return self

    def __next__(self):
        raise TypeError("a per-worker iterator is read by the workers: pass it to "
                        "ClusterCoordinator.schedule()")


class ClusterCoordinator:
    """The chief's coordinator of a ParameterServerStrategy's workers."""

    def __init__(self, strategy):
        self.strategy = strategy
        self._models = []

    def create_per_worker_dataset(self, dataset_fn):
        """``dataset_fn`` a troupe.data dataset of files, or a function without arguments
        returning one (what TensorFlow's dataset_fn is: here it runs once, on the chief, to
        describe the data; each worker reads its share in C++)."""
        dataset = dataset_fn if isinstance(dataset_fn, Dataset) else dataset_fn()
        if not isinstance(dataset, Dataset):
            raise TypeError("create_per_worker_dataset: a troupe.data dataset of files, or a "
                            f"function returning one (got {type(dataset).__name__})")
        return PerWorkerDataset(self, dataset)

    def schedule(self, fn, args=(), kwargs=None):
        step = getattr(fn, "_troupe_step", None)
        if step is None:
            raise errors.InvalidArgumentError(
                f"schedule: {getattr(fn, '__name__', repr(fn))} is a Python function, which "
                "cannot travel to the workers (they run C++ only): schedule a model's "
                "registered steps (model.train_step, model.evaluate_step), a step a C++ "
                "extension registers (model.registered_step(name)), or train with "
                "model.fit()")
        model, steps, registered = step
        if model._strategy is not self.strategy:
            raise errors.InvalidArgumentError(
                "schedule: the model was not made in this strategy's scope()")
        iterators = [a for a in list(args) + list((kwargs or {}).values())
                     if isinstance(a, (PerWorkerIterator, PerWorkerDataset))]
        if len(iterators) != 1:
            raise errors.InvalidArgumentError(
                f"schedule: model.{fn.__name__} takes one argument, a per-worker iterator "
                "(iter(coordinator.create_per_worker_dataset(...)))")
        it = iterators[0]
        pwd = it._per_worker_dataset if isinstance(it, PerWorkerIterator) else it
        value = model._core.schedule(pwd._for(model), registered, steps)
        if all(m is not model for m in self._models):
            self._models.append(model)
        return RemoteValue(model, value)

    def join(self):
        """Waits for every closure scheduled; raises the first error since the last
        join(). Ctrl-C while it waits raises KeyboardInterrupt; what was scheduled stays
        scheduled."""
        for model in self._models:
            model._core.join()

    def done(self):
        return all(model._core.done() for model in self._models)

    def stats(self):
        """Troupe's counts for the models scheduled here, summed: closures scheduled,
        completed and retried, workers lost and rejoined."""
        total = {}
        for model in self._models:
            for k, v in model._core.cluster_stats().items():
                total[k] = total.get(k, 0) + v
        return total


def merge_results(remote_values):
    """The compiled loss and metrics over every batch the closures of ``remote_values``
    scored (one model's; each waited for), their metric states merged as a Keras metric
    updated by each step would hold them (what the tutorial's ``eval_accuracy.result()``
    reads). A closure's error is raised."""
    values = list(remote_values)
    if not values:
        raise ValueError("merge_results: no RemoteValues")
    model = values[0]._model
    if any(v._model is not model for v in values):
        raise ValueError("merge_results: the results of one model's steps")
    return model._core.merged_logs([v._value for v in values])
