"""Keras models trained by Troupe: a ``.keras`` file (or a live Keras 3 model) in, NumPy in
and out, the trained model back to Keras.

    model = troupe.keras.load_model("ctr.keras")          # or Model.from_keras(keras_model)
    model.compile(optimizer=keras.optimizers.Adagrad(0.05), loss="binary_crossentropy",
                  metrics=["auc"])                        # optional: the file's otherwise
    history = model.fit({"user": users, "item": items}, clicks, batch_size=256, epochs=3,
                        validation_data=(val_x, val_y))
    model.predict({"user": users[:10], "item": items[:10]})  # numpy
    model.save("trained.keras")                           # keras.saving.load_model reads it
    keras_model = model.to_keras()                        # a live Keras model, trained weights

Everything a step does runs in C++ (troupe._troupe) with the GIL released; callbacks
(troupe.keras.callbacks, or Keras's own) run between steps; Ctrl-C during fit() stops
training after the current step and raises KeyboardInterrupt.
"""

import io
import json
import os
import tempfile
import zipfile

import numpy as np

from troupe import _troupe
from troupe.data import Dataset
from troupe.keras import callbacks, utils  # noqa: F401

__all__ = ["History", "Model", "callbacks", "load_model", "utils"]


def _batch_hooks(callbacks):
    """Whether a Python callback does something after each batch (its
    on_train_batch_end is not a base class's no-op): then a strategy's fit() stops for it
    after every step."""
    for cb in callbacks:
        if hasattr(cb, "_troupe_callback"):
            continue
        # Keras's base on_train_batch_end calls on_batch_end: either, overridden, counts,
        # and so does one set on the object (keras.callbacks.LambdaCallback's).
        methods = ("on_train_batch_end", "on_batch_end")
        if any(m in getattr(cb, "__dict__", {}) for m in methods):
            return True
        for method in methods:
            for klass in type(cb).__mro__:
                if method in klass.__dict__:
                    if klass.__module__ not in ("troupe.keras.callbacks",
                                                "keras.src.callbacks.callback"):
                        return True
                    break
    return False


class _Step:
    """A model's step registered in C++, by reference: what schedule() sends a worker."""

    def __init__(self, model, name, steps, registered):
        self.__name__ = name
        self._troupe_step = (model, int(steps), registered)

    def __call__(self, *args, **kwargs):
        raise TypeError(f"{self.__name__} runs on the workers: schedule it with a "
                        "ClusterCoordinator, or train with fit()")


class History:
    """What fit() did, as Keras's History: ``history`` maps each metric to its value per
    epoch (``loss``, ``val_loss``, ...), ``epoch`` lists the epochs run."""

    def __init__(self, epoch_logs, params):
        self.epoch = list(range(len(epoch_logs)))
        self.history = {}
        for logs in epoch_logs:
            for k, v in logs.items():
                self.history.setdefault(k, []).append(v)
        self.params = params

    def __repr__(self):
        return f"<troupe.keras.History epochs={len(self.epoch)} keys={sorted(self.history)}>"


def _serialize(obj):
    """compile()'s arguments in the form a .keras file's compile_config holds them:
    strings, numbers, lists and dicts as they are, Keras objects (optimizers, losses,
    metrics) serialized by Keras."""
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    if isinstance(obj, (list, tuple)):
        return [_serialize(o) for o in obj]
    if isinstance(obj, dict):
        return {str(k): _serialize(v) for k, v in obj.items()}
    import keras  # only when a Keras object is given

    return keras.saving.serialize_keras_object(obj)


# What a model saved without compile() is made with: never trained or evaluated with.
_PREDICT_ONLY = {"optimizer": "sgd", "loss": "mean_squared_error"}


def _file_compile_config(data):
    """A .keras file's (zip's) compile settings: a dict, {} when it has none (Keras 3
    writes {}, older versions null, for a model never compiled; a to_json() document never
    has them), None when the file cannot be read here (the C++ reader names what is wrong
    with it)."""
    if not data.startswith(b"PK"):
        return {}
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            return json.loads(z.read("config.json")).get("compile_config") or {}
    except (zipfile.BadZipFile, KeyError, ValueError):
        return None

class Model:
    """A Keras model that Troupe trains. Made by ``load_model`` or ``Model.from_keras``."""

    def __init__(self, data, name, *, labels=None, device="cpu", precision="float32", seed=1,
                 compile_config=None):
        self._name = name
        self._options = {"labels": dict(labels or {}), "device": device,
                         "precision": precision, "seed": int(seed)}
        data = bytes(data)
        # A model saved without compile() predicts and is saved as it is, and trains once
        # compile() gives it a loss (Keras's rule); its C++ replica is made with a stand-in
        # loss that no fit() or evaluate() ever uses.
        in_file = _file_compile_config(data)
        self._compiled = bool(compile_config) or in_file != {}
        settings = compile_config or in_file or {}
        self._steps_per_execution = int(settings.get("steps_per_execution") or 1)
        if compile_config:
            self._compile_json = json.dumps(compile_config)
        elif not self._compiled:
            self._compile_json = json.dumps(_PREDICT_ONLY)
        else:
            self._compile_json = ""
        # A stand-in loss is never written into a saved file; settings given here are.
        self._core = _troupe.KerasModel(name, data, self._compile_json,
                                        self._options["labels"], device, precision, int(seed),
                                        bool(compile_config))
        # Made in a ParameterServerStrategy's scope: its variables go to the PS tasks.
        from troupe.distribute import _current_strategy

        self._strategy = _current_strategy()
        if self._strategy is not None:
            self._strategy._adopt(self)
        self.stop_training = False
        self.history = None

    @classmethod
    def from_keras(cls, keras_model, **options):
        """A live Keras 3 model (its graph, weights and compile settings) as a Troupe
        model; ``options`` as load_model's."""
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "model.keras")
            keras_model.save(path)
            with open(path, "rb") as f:
                data = f.read()
        return cls(data, f"{keras_model.name}.keras", **options)

    # ---- what it is ----
    @property
    def name(self):
        return self._name

    @property
    def input_names(self):
        return [i["name"] for i in self._core.inputs()]

    @property
    def output_names(self):
        return [o["name"] for o in self._core.outputs()]

    @property
    def label_names(self):
        """The label column of each output, in output order."""
        return [label["name"] for label in self._core.labels()]

    @property
    def inputs(self):
        """Each input's name, dtype and per-example shape."""
        return self._core.inputs()

    def _file_bytes(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "model.keras")
            self._core.save(path)
            with open(path, "rb") as f:
                return f.read()

    # ---- Keras's methods ----
    def compile(self, optimizer="rmsprop", loss=None, loss_weights=None, metrics=None,
                weighted_metrics=None, steps_per_execution=1, **unsupported):
        """Keras's compile(): replaces the file's compile settings; the weights stay as they
        are. An optimizer, loss or metric Troupe does not implement is an
        InvalidArgumentError naming it."""
        if unsupported:
            raise TypeError(f"compile: Troupe does not take {', '.join(sorted(unsupported))}")
        config = {"optimizer": _serialize(optimizer), "loss": _serialize(loss),
                  "loss_weights": _serialize(loss_weights), "metrics": _serialize(metrics),
                  "weighted_metrics": _serialize(weighted_metrics),
                  "steps_per_execution": int(steps_per_execution)}
        data = self._file_bytes()  # the weights as they are now
        self._compile_json = json.dumps(config)
        self._compiled = True
        self._steps_per_execution = int(steps_per_execution)
        o = self._options
        self._core = _troupe.KerasModel(self._name, data, self._compile_json, o["labels"],
                                        o["device"], o["precision"], o["seed"], True)

    def _check_compiled(self, what):
        if not self._compiled:
            raise RuntimeError(f"{what}: the model was saved without compile(): call "
                               "compile() first")

    def _data(self, x, y, batch_size, shuffle, what):
        if hasattr(x, "_spec") and not isinstance(x, Dataset):  # a DistributedDataset
            if y is not None or batch_size is not None:
                raise ValueError(f"{what}: a distributed dataset carries its labels and "
                                 "batches (no y, no batch_size)")
            return x._spec(self.label_names, 32, self.input_names)
        if isinstance(x, Dataset):
            if y is not None:
                raise ValueError(f"{what}: y is given with the dataset's labels in it")
            if batch_size is not None and x.element_spec_batch_size is not None:
                raise ValueError(f"{what}: the dataset is batched already (batch_size)")
            return x._spec(self.label_names, batch_size or 32, self.input_names)
        if isinstance(x, np.ndarray) or not isinstance(x, dict):
            names = self.input_names
            if len(names) != 1:
                raise ValueError(f"{what}: the model has {len(names)} inputs; give x as a dict "
                                 f"by input name ({', '.join(names)})")
            x = {names[0]: x}
        ds = Dataset.from_tensor_slices((x, y))
        if shuffle:
            ds = ds.shuffle(1)
        return ds._spec(self.label_names, batch_size or 32, self.input_names)

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None,
            validation_data=None, shuffle=True, steps_per_epoch=None):
        """Keras's fit(): ``x`` a dict of arrays by input name (an array for a model of one
        input) with ``y`` its labels, or a troupe.data.Dataset. Returns a History."""
        self._check_compiled("fit")
        data = self._data(x, y, batch_size, shuffle, "fit")
        if data["repeat"] < 0 and not steps_per_epoch:
            raise ValueError("fit: the dataset repeats forever: give steps_per_epoch")
        validation = None
        if validation_data is not None:
            if isinstance(validation_data, Dataset):
                validation = self._data(validation_data, None, None, False, "validation_data")
            else:
                if not isinstance(validation_data, tuple) or len(validation_data) != 2:
                    raise ValueError("fit: validation_data is (x, y) or a troupe.data.Dataset")
                vx, vy = validation_data
                validation = self._data(vx, vy, batch_size, False, "validation_data")
            validation["repeat"] = 1
        callbacks = list(callbacks or [])
        for cb in callbacks:
            if hasattr(cb, "set_model") and not hasattr(cb, "_troupe_callback"):
                cb.set_model(self)
        if verbose == "auto":  # Keras's: a line per epoch under a ParameterServerStrategy
            from troupe.distribute import ParameterServerStrategy

            verbose = 2 if isinstance(self._strategy, ParameterServerStrategy) else 1
        self.stop_training = False
        strategy = self._strategy._core if self._strategy is not None else None
        out = self._core.fit(data, validation, int(epochs), int(steps_per_epoch or 0),
                             callbacks, self, int(verbose), _batch_hooks(callbacks), strategy)
        self.history = History(out["epochs"], {"epochs": int(epochs), "steps": steps_per_epoch,
                                               "verbose": verbose})
        self.history.stats = out["stats"]
        return self.history

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", return_dict=False):
        """Keras's evaluate(): the compiled loss and metrics over the data; a dict with
        return_dict, else the loss alone (no metrics) or [loss, metrics in name order]."""
        self._check_compiled("evaluate")
        logs = self._core.evaluate(self._data(x, y, batch_size, False, "evaluate"))
        if return_dict:
            return logs
        rest = [logs[k] for k in sorted(logs) if k != "loss"]
        return logs["loss"] if not rest else [logs["loss"]] + rest

    def predict(self, x, batch_size=None, verbose="auto"):
        """Keras's predict(): every output for ``x`` (a dict of arrays by input name, or an
        array for a model of one input); one array for a model of one output, else a list
        in output order."""
        if not isinstance(x, dict):
            names = self.input_names
            if len(names) != 1:
                raise ValueError(f"predict: the model has {len(names)} inputs; give x as a "
                                 f"dict by input name ({', '.join(names)})")
            x = {names[0]: x}
        outs = self._core.predict(x, int(batch_size or 32))
        return outs[0] if len(outs) == 1 else outs

    @property
    def train_step(self):
        """The model's registered training step, for ClusterCoordinator.schedule(): one
        batch of the worker's per-worker iterator (``steps_per_execution`` of them),
        trained on the PS tasks' variables."""
        return _Step(self, "train_step", self._steps_per_execution, "keras/train")

    def registered_step(self, name, steps=1):
        """A step a C++ extension registered by ``name`` in every task
        (include/troupe/python_extension.hpp), for ClusterCoordinator.schedule(): run
        ``steps`` times on a worker with this model's per-worker dataset; its result's
        fetch() gives the BatchStats it returns as logs."""
        return _Step(self, name, int(steps), str(name))

    @property
    def evaluate_step(self):
        """The model's registered evaluation step, for ClusterCoordinator.schedule(): the
        compiled loss and metrics of one batch of the worker's per-worker iterator, under
        the PS tasks' variables as they are (nothing is trained). Merge the results with
        troupe.distribute.coordinator.merge_results()."""
        return _Step(self, "evaluate_step", 1, "keras/evaluate")

    def get_weights(self):
        """The weights by their Keras path ("dense/kernel") as float32 arrays."""
        return self._core.get_weights()

    def save(self, filepath):
        """The model as a .keras file, its weights as trained: Keras loads it."""
        self._core.save(os.fspath(filepath))

    def to_keras(self):
        """A live Keras model with the trained weights (Keras must be importable)."""
        import keras

        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "model.keras")
            self._core.save(path)
            return keras.saving.load_model(path)

    def __repr__(self):
        return (f"<troupe.keras.Model {self._name!r} inputs={self.input_names} "
                f"outputs={self.output_names}>")


def load_model(filepath, *, labels=None, device="cpu", precision="float32", seed=1):
    """A Keras 3 model file (.keras, or model.to_json()'s JSON) as a Troupe model.
    ``labels`` maps an output's name to its label column (default ``label`` for a model
    of one output, an output's own name for several); ``device`` (cpu, cuda, cuda:N) and
    ``precision`` (float32, tf32, mixed_bfloat16, mixed_float16) as troupe train's. An
    unreadable file is NotFoundError; a damaged one, or a layer, argument or dtype Troupe
    does not support, is InvalidArgumentError naming it."""
    filepath = os.fspath(filepath)
    try:
        with open(filepath, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        from troupe.errors import NotFoundError

        raise NotFoundError(f"model file '{filepath}' cannot be opened") from None
    return Model(data, filepath, labels=labels, device=device, precision=precision, seed=seed)
