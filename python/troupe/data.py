"""Datasets as specifications executed in C++ (what ``dataset_fn`` builds in TensorFlow's
tutorials): files of a format Troupe reads, or NumPy arrays held in memory.

    ds = troupe.data.TFRecordDataset(["train-0.tfrecord", "train-1.tfrecord"])
    ds = ds.shuffle(10_000, seed=7).batch(512).repeat().prefetch(2)
    model.fit(ds, epochs=3, steps_per_epoch=100)

    ds = troupe.data.Dataset.from_tensor_slices(({"image": x}, y)).shuffle(len(y)).batch(64)

The features are the model's: each input by its name, each output's labels by the label
column (``label`` for a model of one output). Whatever the order the methods were called
in, a pipeline runs as shard -> shuffle -> batch -> cache -> repeat -> prefetch; a method
called twice keeps its last arguments. Arrays shuffle whole (any buffer size shuffles all
examples, a new order each epoch); files shuffle examples in a buffer of that size.
"""

import copy
import os

import numpy as np

_FORMATS = ("tfrecord", "criteo", "csv", "idx")
_ONE_INPUT = ""  # the key of features given as one array


class Dataset:
    """A dataset specification. Made by ``from_tensor_slices`` or one of the file
    datasets; each method returns a new specification."""

    def __init__(self, kind, arrays=None, files=None, format=""):
        self._kind = kind
        self._arrays = arrays
        self._files = list(files or [])
        self._format = format
        self._batch = None
        self._drop_remainder = False
        self._shuffle = 0
        self._seed = 1
        self._repeat = 1
        self._cache = False
        self._prefetch = 2
        self._shard = None

    # ---- making one ----
    @staticmethod
    def from_tensor_slices(tensors):
        """Examples sliced along the first axis of NumPy arrays: a dict of arrays by
        feature name, or a tuple ``(features, labels)`` whose labels are an array (a model
        of one output) or a dict by label column. For one process and
        MultiWorkerMirroredStrategy scripts (each worker holds the arrays)."""
        if isinstance(tensors, tuple):
            if len(tensors) != 2:
                raise ValueError("from_tensor_slices: a tuple is (features, labels)")
            features, labels = tensors
        else:
            features, labels = tensors, None
        if not isinstance(features, dict):
            try:  # one array: the input of a model of one input
                return Dataset("arrays", arrays={"features": {_ONE_INPUT: np.asarray(features)},
                                                 "labels": labels})
            except (TypeError, ValueError):
                raise TypeError("from_tensor_slices: the features are an array (a model of "
                                "one input) or a dict of arrays by input name (got "
                                f"{type(features).__name__})") from None
        arrays = {str(k): np.asarray(v) for k, v in features.items()}
        return Dataset("arrays", arrays={"features": arrays, "labels": labels})

    @staticmethod
    def from_files(paths, format=None):
        """Files of one format (``tfrecord``, ``criteo``, ``csv`` or ``idx``; by default
        from their names). A directory stands for its files, sorted."""
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        if format is not None and format not in _FORMATS:
            raise ValueError(f"format must be one of {', '.join(_FORMATS)} (got {format!r})")
        files = []
        for p in paths:
            p = os.fspath(p)
            if os.path.isdir(p):
                files.extend(sorted(os.path.join(p, f) for f in os.listdir(p)
                                    if os.path.isfile(os.path.join(p, f))))
            else:
                files.append(p)
        return Dataset("files", files=files, format=format or "")

    # ---- transformations (new specifications) ----
    def _with(self, **changes):
        d = copy.copy(self)
        for k, v in changes.items():
            setattr(d, "_" + k, v)
        return d

    def batch(self, batch_size, drop_remainder=False):
        if int(batch_size) < 1:
            raise ValueError(f"batch: batch_size must be at least 1 (got {batch_size})")
        return self._with(batch=int(batch_size), drop_remainder=bool(drop_remainder))

    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=True):
        if not reshuffle_each_iteration:
            raise ValueError("shuffle: Troupe draws a new order every epoch "
                             "(reshuffle_each_iteration=False is not supported)")
        return self._with(shuffle=max(1, int(buffer_size)),
                          seed=self._seed if seed is None else int(seed))

    def repeat(self, count=None):
        return self._with(repeat=-1 if count is None or count < 0 else int(count))

    def prefetch(self, buffer_size):
        return self._with(prefetch=max(0, int(buffer_size)))

    def cache(self, filename=""):
        if filename:
            raise ValueError("cache: Troupe caches in memory only (no filename)")
        return self._with(cache=True)

    def shard(self, num_shards, index):
        if not 0 <= int(index) < int(num_shards):
            raise ValueError(f"shard: index {index} is not in [0, {num_shards})")
        return self._with(shard=(int(num_shards), int(index)))

    @property
    def element_spec_batch_size(self):
        return self._batch

    @property
    def repeats_forever(self):
        return self._repeat < 0

    def __repr__(self):
        what = (f"{len(self._files)} {self._format or 'data'} file(s)" if self._kind == "files"
                else f"{len(self._arrays['features'])} array(s)")
        return f"<troupe.data.Dataset of {what}, batch {self._batch}>"

    # ---- what the C++ module reads ----
    def _spec(self, label_names, default_batch=32, input_names=()):
        """This specification as the dict the C++ module takes; label_names are the
        model's label columns (to place labels given as one array), input_names its inputs
        (to place features given as one array)."""
        batch = self._batch or default_batch
        base = {"batch": batch, "drop_remainder": self._drop_remainder, "seed": self._seed,
                "repeat": self._repeat}
        if self._kind == "files":
            base.update(kind="files", files=self._files, format=self._format,
                        shuffle=self._shuffle, cache=self._cache, prefetch=self._prefetch,
                        shard=self._shard)
            return base
        arrays = dict(self._arrays["features"])
        if _ONE_INPUT in arrays:
            if len(input_names) != 1:
                raise ValueError(f"the features are one array for a model of "
                                 f"{len(input_names)} inputs: give a dict by input name "
                                 f"({', '.join(input_names)})")
            arrays = {input_names[0]: arrays[_ONE_INPUT]}
        arrays.update(_label_arrays(self._arrays["labels"], label_names))
        base.update(kind="arrays", arrays=arrays, shuffle=self._shuffle > 0, shard=self._shard)
        return base


def _label_arrays(labels, label_names):
    """Labels given as one array (one output), a list (outputs in order) or a dict (by
    output or label column name), as arrays by label column."""
    if labels is None:
        return {}
    if isinstance(labels, dict):
        return {str(k): np.asarray(v) for k, v in labels.items()}
    if isinstance(labels, (list, tuple)):
        if len(labels) != len(label_names):
            raise ValueError(f"{len(labels)} label arrays for a model of "
                             f"{len(label_names)} outputs ({', '.join(label_names)})")
        return {n: np.asarray(v) for n, v in zip(label_names, labels)}
    if len(label_names) != 1:
        raise ValueError(f"one label array for a model of {len(label_names)} outputs: give "
                         f"a dict by output name ({', '.join(label_names)})")
    return {label_names[0]: np.asarray(labels)}


def TFRecordDataset(filenames):
    """TFRecord files of tf.train.Example records, each feature read by its name."""
    return Dataset.from_files(filenames, "tfrecord")


def CriteoDataset(filenames):
    """Criteo's tab-separated text: ``label, I1..I13, C1..C26``."""
    return Dataset.from_files(filenames, "criteo")


def CsvDataset(filenames):
    """CSV files whose header line names the columns."""
    return Dataset.from_files(filenames, "csv")


def IdxDataset(images, labels=None):
    """Fashion-MNIST's IDX files: the images as ``image``, the labels as ``label``."""
    return Dataset.from_files([images] + ([labels] if labels else []), "idx")


def write_tfrecord(path, arrays):
    """Writes ``arrays`` (a dict of arrays [n, ...] by feature name) as a TFRecord file of n
    tf.train.Example records, each feature its array's row: the files a
    ParameterServerStrategy's workers read. Returns n."""
    from troupe import _troupe

    return _troupe.write_tfrecord(os.fspath(path), {str(k): np.asarray(v)
                                                    for k, v in arrays.items()})
