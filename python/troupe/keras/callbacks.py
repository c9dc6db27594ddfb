"""Callbacks for ``troupe.keras.Model.fit``.

Troupe's own (``BackupAndRestore``, ``ModelCheckpoint``, ``TensorBoard``,
``EarlyStopping``) run in C++ as fit() runs, as in a C++ program. Any other object with
Keras's callback methods (``on_train_begin``, ``on_epoch_begin``, ``on_train_batch_end``,
``on_epoch_end``, ``on_train_end``; Keras's own ``keras.callbacks.Callback`` subclasses
included) is called in this process between C++ steps, with Keras's arguments; setting
``self.model.stop_training = True`` ends training after the current epoch, and what one
raises ends fit() and is raised from it.
"""


class Callback:
    """A base with Keras's callback methods, each doing nothing; ``self.model`` is the
    troupe.keras.Model being trained."""

    def __init__(self):
        self.model = None

    def set_model(self, model):
        self.model = model

    def on_train_begin(self, logs=None):
        pass

    def on_epoch_begin(self, epoch, logs=None):
        pass

    def on_train_batch_end(self, batch, logs=None):
        self.on_batch_end(batch, logs=logs)  # Keras's alias

    def on_batch_end(self, batch, logs=None):
        pass

    def on_epoch_end(self, epoch, logs=None):
        pass

    def on_train_end(self, logs=None):
        pass


def _save_freq(save_freq):
    if save_freq == "epoch":
        return 0
    if isinstance(save_freq, int) and save_freq > 0:
        return save_freq
    raise ValueError(f"save_freq is 'epoch' or a number of steps (got {save_freq!r})")


class BackupAndRestore:
    """Keras's BackupAndRestore: the model, its optimizer and where training stands are
    backed up in ``backup_dir`` (every epoch, or every ``save_freq`` steps); a fit() that
    finds a backup resumes from it; a fit() that completes deletes it."""

    def __init__(self, backup_dir, save_freq="epoch"):
        self._troupe_callback = {"type": "BackupAndRestore", "backup_dir": str(backup_dir),
                                 "save_freq": _save_freq(save_freq)}


class ModelCheckpoint:
    """Checkpoints of the weights in ``directory`` (Troupe's checkpoint files, what the
    side-car evaluator follows), every epoch or every ``save_freq`` steps."""

    def __init__(self, directory, monitor="val_loss", save_best_only=False, save_freq="epoch",
                 max_to_keep=5):
        self._troupe_callback = {"type": "ModelCheckpoint", "directory": str(directory),
                                 "monitor": monitor, "save_best_only": bool(save_best_only),
                                 "save_freq": _save_freq(save_freq),
                                 "max_to_keep": int(max_to_keep)}


class TensorBoard:
    """TensorBoard event files in ``log_dir`` (``train/`` and ``validation/``), every epoch
    or every ``update_freq`` steps."""

    def __init__(self, log_dir="logs", update_freq="epoch"):
        freq = 0 if update_freq == "epoch" else _save_freq(update_freq)
        self._troupe_callback = {"type": "TensorBoard", "log_dir": str(log_dir),
                                 "update_freq": freq}


class EarlyStopping:
    """Stops training when ``monitor`` has not improved by ``min_delta`` for ``patience``
    epochs (lower is better for losses and errors, higher otherwise)."""

    def __init__(self, monitor="val_loss", min_delta=0.0, patience=0):
        self._troupe_callback = {"type": "EarlyStopping", "monitor": monitor,
                                 "min_delta": float(min_delta), "patience": int(patience)}
