"""TensorFlow's "Custom training loop with Keras and MultiWorkerMirroredStrategy" tutorial
on Troupe, ported as close to line for line as the API allows: the same CNN, the same
dataset function of an InputContext, the same global batch, epochs and steps, the same
per-epoch line and checkpoints written by the chief only.

Where it cannot be line for line: the tutorial's step is a Python function under
tf.GradientTape, and Troupe's steps run in C++ and never call Python. Its loop
(strategy.run(train_step) per batch, strategy.reduce of the losses, a metric reset each
epoch) is what ``model.fit`` does here on every worker, the gradients all-reduced each
step; the per-epoch line comes from a callback with the epoch's logs. The tutorial reads
MNIST through Keras; this reads Debian's Fashion-MNIST (the same shapes). Its L2 kernel
regularizers are left out (Troupe does not train Keras regularizers).

Every worker runs this script (worker 0 the chief):

    build/bin/troupe launch --workers 2 --restart-failed -- python3 examples/python/mwms_tutorial.py

With --elastic a worker that dies is left behind, the others carry on, and the restarted
worker joins again with their weights, epoch and step (TensorFlow's tutorial instead
restarts the whole job from its last checkpoint). Each worker ends with one JSON line.
"""

import argparse
import gzip
import json
import os
import shutil
import sys
import tempfile

import numpy as np

import troupe

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
parser.add_argument("--per-worker-batch-size", type=int, default=64)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--steps-per-epoch", type=int, default=70)
parser.add_argument("--elastic", action="store_true",
                    help="keep training when a worker dies and take it back when it returns")
args = parser.parse_args()


def read_idx(path):
    """An IDX file (gzipped or not) as a NumPy array of its shape."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    rank = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * rank).reshape(dims)


def idx_file(stem):
    path = os.path.join(args.data_dir, stem)
    return path if os.path.exists(path) else path + ".gz"


def mnist_dataset():
    x_train = read_idx(idx_file("train-images-idx3-ubyte"))
    y_train = read_idx(idx_file("train-labels-idx1-ubyte"))
    # The `x` arrays are in uint8 and have values in the range [0, 255].
    # You need to convert them to float32 with values in the range [0, 1]
    x_train = x_train / np.float32(255)
    y_train = y_train.astype(np.int64)
    train_dataset = troupe.data.Dataset.from_tensor_slices(
        (x_train, y_train)).shuffle(60000)
    return train_dataset


def dataset_fn(global_batch_size, input_context):
    batch_size = input_context.get_per_replica_batch_size(global_batch_size)
    dataset = mnist_dataset()
    dataset = dataset.shard(input_context.num_input_pipelines,
                            input_context.input_pipeline_id)
    dataset = dataset.batch(batch_size)
    return dataset


def build_cnn_model():
    import keras

    return keras.Sequential([
        keras.Input(shape=(28, 28)),
        keras.layers.Reshape(target_shape=(28, 28, 1)),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(10),
    ])


tf_config = json.loads(os.environ.get("TF_CONFIG") or
                       '{"cluster": {"worker": ["localhost:0"]}, '
                       '"task": {"type": "worker", "index": 0}}')
per_worker_batch_size = args.per_worker_batch_size
num_workers = len(tf_config["cluster"]["worker"])
global_batch_size = per_worker_batch_size * num_workers
num_epochs = args.epochs
num_steps_per_epoch = args.steps_per_epoch

strategy = troupe.distribute.MultiWorkerMirroredStrategy(elastic=args.elastic)

with strategy.scope():
    # Model building/compiling need to be within `strategy.scope()`.
    import keras

    cnn = build_cnn_model()
    cnn.compile(optimizer=keras.optimizers.RMSprop(learning_rate=0.001),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=[keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")])
    multi_worker_model = troupe.keras.Model.from_keras(cnn)

multi_worker_dataset = strategy.distribute_datasets_from_function(
    lambda input_context: dataset_fn(global_batch_size, input_context))


def _is_chief(task_type, task_id, cluster_spec):
    return (task_type is None
            or task_type == "chief"
            or (task_type == "worker"
                and task_id == 0
                and "chief" not in cluster_spec))


def _get_temp_dir(dirpath, task_id):
    base_dirpath = "workertemp_" + str(task_id)
    temp_dir = os.path.join(dirpath, base_dirpath)
    os.makedirs(temp_dir, exist_ok=True)
    return temp_dir


def write_filepath(filepath, task_type, task_id, cluster_spec):
    dirpath = os.path.dirname(filepath)
    base = os.path.basename(filepath)
    if not _is_chief(task_type, task_id, cluster_spec):
        dirpath = _get_temp_dir(dirpath, task_id)
    return os.path.join(dirpath, base)


task_type, task_id = (tf_config["task"]["type"], tf_config["task"]["index"])
checkpoint_dir = os.path.join(os.environ.get("TROUPE_RUN_DIR") or tempfile.mkdtemp(), "ckpt")
os.makedirs(checkpoint_dir, exist_ok=True)


class EpochLine(troupe.keras.callbacks.Callback):
    """The tutorial's line after each epoch, and the chief's checkpoint (the others write
    to a temporary directory and remove it, as the tutorial's workers do)."""

    def on_epoch_end(self, epoch, logs=None):
        print("Epoch: %d, accuracy: %f, train_loss: %f." %
              (epoch, logs["train_accuracy"], logs["loss"]), file=sys.stderr, flush=True)
        path = write_filepath(os.path.join(checkpoint_dir, "model.keras"), task_type, task_id,
                              tf_config["cluster"])
        self.model.save(path)
        if not _is_chief(task_type, task_id, tf_config["cluster"]):
            # The whole directory, as the tutorial's tf.io.gfile.rmtree: an incarnation of
            # this worker killed while saving may have left a partial file there.
            shutil.rmtree(os.path.dirname(path))


history = multi_worker_model.fit(multi_worker_dataset, epochs=num_epochs,
                                 steps_per_epoch=num_steps_per_epoch,
                                 callbacks=[EpochLine()], verbose=0)

# What every worker ends with: the same weights, so the same test accuracy.
x_test = read_idx(idx_file("t10k-images-idx3-ubyte")) / np.float32(255)
y_test = read_idx(idx_file("t10k-labels-idx1-ubyte")).astype(np.int64)
logits = multi_worker_model.predict(x_test, batch_size=1000)
result = {"ok": True, "program": "mwms_tutorial.py", "task": f"{task_type}:{task_id}",
          "epochs_run": len(history.epoch),
          "test_accuracy": float(np.mean(np.argmax(logits, axis=1) == y_test))}
result.update({k: v[-1] for k, v in history.history.items()})
result.update(history.stats)
print(json.dumps(result), flush=True)
