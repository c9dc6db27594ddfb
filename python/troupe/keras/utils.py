"""``keras.utils``'s SidecarEvaluator on Troupe: an evaluator task that follows the chief's
checkpoints (troupe.keras.callbacks.ModelCheckpoint) and scores each new one, as in the
third part of TensorFlow's parameter-server tutorial:

    if cluster_resolver.task_type == "evaluator":
        eval_model = troupe.keras.load_model("model.keras")
        troupe.keras.utils.SidecarEvaluator(
            model=eval_model, data=eval_data, checkpoint_dir=checkpoint_dir,
            steps=None, max_evaluations=None).start()
"""

import os
import sys

__all__ = ["SidecarEvaluator"]


class SidecarEvaluator:
    """Scores the newest checkpoint in ``checkpoint_dir`` it has not scored yet, over and
    over, until the chief writes its final one (or ``max_evaluations`` are done). It reads
    files only: it never connects to the cluster. A checkpoint the chief deleted or damaged
    between listing and reading is skipped with a warning. Each evaluation is a JSON line
    on stdout (and, with ``log_dir``, TensorBoard summaries in ``log_dir/eval``).

    ``steps``: Troupe scores every example of ``data`` (only None is taken). ``callbacks``
    are not called (none is taken). ``idle_timeout_seconds``: no new checkpoint and no final
    one for that long is an UnavailableError (the chief died for good)."""

    def __init__(self, model, data, checkpoint_dir, steps=None, max_evaluations=None,
                 callbacks=None, log_dir=None, idle_timeout_seconds=600.0):
        if steps is not None:
            raise ValueError("SidecarEvaluator: Troupe scores every example of the data "
                             "(steps=None)")
        if callbacks:
            raise ValueError("SidecarEvaluator: Troupe's evaluator calls no callbacks")
        model._check_compiled("SidecarEvaluator")
        self._model = model
        self._data = model._data(data, None, None, False, "SidecarEvaluator")
        self._data["repeat"] = 1
        self._checkpoint_dir = os.fspath(checkpoint_dir)
        self._max_evaluations = int(max_evaluations or 0)
        self._log_dir = os.fspath(log_dir) if log_dir else ""
        self._idle_timeout = float(idle_timeout_seconds)

    def start(self):
        """Evaluates until the chief's final checkpoint; returns {"evaluations",
        "skipped", "last_step", "logs"} (the last evaluation's metrics by Keras's names)."""
        sys.stdout.flush()  # its lines and ours in order
        return self._model._core.sidecar_evaluate(self._data, self._checkpoint_dir,
                                                  self._max_evaluations, self._idle_timeout,
                                                  self._log_dir)
