"""TensorFlow's parameter-server training tutorial on Troupe (its model.fit part, with
--loop custom its custom training loop, and its side-car evaluator), ported as close to
line for line as the API allows: `tf.distribute` becomes `troupe.distribute`, `tf.keras`
model files become `troupe.keras` models, and the `dataset_fn` becomes a troupe.data
dataset of files that every worker reads in C++.

Run it as a job of 2 PS tasks, 2 workers and an evaluator, a worker killed 2 s in and
restarted:

    build/bin/troupe launch --ps 2 --workers 2 --evaluator --restart-failed \
        --chaos kill:worker:1@2s -- python3 examples/python/ps_tutorial.py

Without --model it builds the tutorial's model (StringLookup + Embedding + Dense) and its
toy data with Keras first (Keras and TensorFlow importable on the chief); with --model and
--data it trains those. The chief ends with one JSON line of its results.
"""

import argparse
import json
import os
import sys
import tempfile

import numpy as np

import troupe

# The tutorial's cluster: TF_CONFIG names it (troupe launch writes it for each task).
cluster_resolver = troupe.distribute.cluster_resolver.TFConfigClusterResolver()
if cluster_resolver.task_type in ("worker", "ps"):
    # Start a server and wait: the chief gives this task its work (the model arrives as
    # data), then ends the job.
    server = troupe.distribute.Server(
        cluster_resolver.cluster_spec(),
        job_name=cluster_resolver.task_type,
        task_index=cluster_resolver.task_id,
        protocol=cluster_resolver.rpc_layer or "grpc",
        start=True)
    server.join()
    print(json.dumps({"ok": True, "task": f"{cluster_resolver.task_type}:"
                                          f"{cluster_resolver.task_id}"}))
    sys.exit(0)

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", help="a .keras file (default: the tutorial's, built here)")
parser.add_argument("--data", nargs="*", help="TFRecord training files")
parser.add_argument("--validation", nargs="*", default=[], help="TFRecord validation files")
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--steps-per-epoch", type=int, default=20)
parser.add_argument("--batch", type=int, default=64)
parser.add_argument("--out", help="write the trained model here (.keras)")
parser.add_argument("--loop", choices=["fit", "custom"], default="fit",
                    help="model.fit (the tutorial's first part) or the custom training loop "
                         "with ClusterCoordinator.schedule and join (its second part)")
args = parser.parse_args()

working_dir = os.environ.get("TROUPE_RUN_DIR") or tempfile.mkdtemp(prefix="ps_tutorial-")


def tutorial_model_and_data(directory):
    """The tutorial's model and toy data: three words of a vocabulary per example, label
    "yes" when most of them are among the first three words."""
    import keras

    feature_vocab = ["avenger", "ironman", "batman", "hulk", "spiderman", "kingkong",
                     "wonder_woman"]
    raw_feature_input = keras.layers.Input(shape=(3,), dtype="string", name="features")
    feature_lookup_layer = keras.layers.StringLookup(vocabulary=feature_vocab,
                                                     mask_token=None, name="feature_lookup")
    feature_id_input = feature_lookup_layer(raw_feature_input)
    emb_layer = keras.layers.Embedding(input_dim=len(feature_lookup_layer.get_vocabulary()),
                                       output_dim=16, name="embedding")
    emb_output = keras.layers.GlobalAveragePooling1D()(emb_layer(feature_id_input))
    dense_output = keras.layers.Dense(units=1, activation="sigmoid", name="dense")(emb_output)
    model = keras.Model(raw_feature_input, dense_output)
    model.compile(optimizer=keras.optimizers.RMSprop(learning_rate=0.1),
                  loss="binary_crossentropy", metrics=["accuracy"])
    model_path = os.path.join(directory, "tutorial.keras")
    model.save(model_path)

    rng = np.random.default_rng(0)
    words = np.array(feature_vocab + ["unknown"])[rng.integers(0, 8, size=(4096, 3))]
    labels = (np.isin(words, feature_vocab[:3]).sum(axis=1) >= 2).astype(np.int64)
    train = os.path.join(directory, "train.tfrecord")
    test = os.path.join(directory, "test.tfrecord")
    troupe.data.write_tfrecord(train, {"features": words[:3840].astype(object),
                                       "label": labels[:3840]})
    troupe.data.write_tfrecord(test, {"features": words[3840:].astype(object),
                                      "label": labels[3840:]})
    return model_path, [train], [test]


if args.model:
    model_path, train_files, validation_files = args.model, args.data, args.validation
elif cluster_resolver.task_type == "evaluator":  # the same data, in a directory of its own
    os.makedirs(os.path.join(working_dir, "evaluator"), exist_ok=True)
    model_path, train_files, validation_files = tutorial_model_and_data(
        os.path.join(working_dir, "evaluator"))
else:
    model_path, train_files, validation_files = tutorial_model_and_data(working_dir)

log_dir = os.path.join(working_dir, "log")
ckpt_filepath = os.path.join(working_dir, "ckpt")
backup_dir = os.path.join(working_dir, "backup")

if cluster_resolver.task_type == "evaluator":
    # The tutorial's side-car evaluation: a model of the same architecture scores each
    # checkpoint the chief writes, until its last one. It reads files only.
    if not validation_files:
        sys.exit("the evaluator scores --validation files: give them")
    eval_model = troupe.keras.load_model(model_path)
    eval_data = troupe.data.TFRecordDataset(validation_files).batch(256)
    outcome = troupe.keras.utils.SidecarEvaluator(
        model=eval_model,
        data=eval_data,
        # dir for training-saved checkpoint
        checkpoint_dir=ckpt_filepath,
        steps=None,  # Eval until dataset is exhausted
        max_evaluations=None,  # Until the chief's last checkpoint
        log_dir=log_dir,
    ).start()
    result = {"ok": True, "program": "ps_tutorial.py", "task": "evaluator",
              "evaluations": outcome["evaluations"], "last_step": outcome["last_step"]}
    result.update(outcome["logs"])
    print(json.dumps(result), flush=True)
    sys.exit(0)

# The chief: a strategy over the cluster, its variables sharded as the tutorial's.
NUM_PS = cluster_resolver.cluster_spec().num_tasks("ps")
variable_partitioner = troupe.distribute.experimental.partitioners.MinSizePartitioner(
    min_shard_bytes=(256 << 10), max_shards=NUM_PS)
strategy = troupe.distribute.ParameterServerStrategy(
    cluster_resolver, variable_partitioner=variable_partitioner)


# What the tutorial's dataset_fn does, run by every worker on its share of the files.
dataset = (troupe.data.TFRecordDataset(train_files)
           .shuffle(1024, seed=1).batch(args.batch).repeat().prefetch(2))

with strategy.scope():
    model = troupe.keras.load_model(model_path)

callbacks = [
    troupe.keras.callbacks.TensorBoard(log_dir=log_dir),
    troupe.keras.callbacks.ModelCheckpoint(ckpt_filepath),
    troupe.keras.callbacks.BackupAndRestore(backup_dir=backup_dir),
]

validation = (troupe.data.TFRecordDataset(validation_files).batch(256)
              if validation_files else None)
result = {"ok": True, "program": "ps_tutorial.py", "loop": args.loop}
if args.loop == "fit":
    history = model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch,
                        callbacks=callbacks, validation_data=validation, verbose=0)
    result["epochs_run"] = len(history.epoch)
    result.update({k: v[-1] for k, v in history.history.items()})
    result.update(history.stats)
else:
    # The tutorial's custom training loop: the coordinator schedules the model's train step
    # on the workers, each reading its iterator over its share of the data.
    coordinator = troupe.distribute.coordinator.ClusterCoordinator(strategy)

    def per_worker_dataset_fn():
        return dataset

    per_worker_dataset = coordinator.create_per_worker_dataset(per_worker_dataset_fn)
    per_worker_iterator = iter(per_worker_dataset)
    for i in range(args.epochs):
        for _ in range(args.steps_per_epoch):
            last = coordinator.schedule(model.train_step, args=(per_worker_iterator,))
        coordinator.join()
        print(f"Finished epoch {i}, loss is {last.fetch()['loss']:f}.", file=sys.stderr)
    result["epochs_run"] = args.epochs
    result.update(last.fetch())
    result["steps"] = coordinator.stats()["closures_completed"]  # training steps
    if validation_files:
        # The tutorial's inline evaluation: the model's evaluation step scheduled on the
        # workers, each reading its share of the validation files; the batches' metrics
        # merged as the tutorial's eval_accuracy metric accumulates them.
        def per_worker_eval_dataset_fn():
            return troupe.data.TFRecordDataset(validation_files).batch(8)

        per_worker_eval_dataset = coordinator.create_per_worker_dataset(
            per_worker_eval_dataset_fn)
        per_worker_eval_iterator = iter(per_worker_eval_dataset)
        eval_steps_per_epoch = 32
        eval_results = [coordinator.schedule(model.evaluate_step,
                                             args=(per_worker_eval_iterator,))
                        for _ in range(eval_steps_per_epoch)]
        coordinator.join()
        eval_logs = troupe.distribute.coordinator.merge_results(eval_results)
        print("Evaluation accuracy: %f" % eval_logs["accuracy"], file=sys.stderr)
        result["inline_val_accuracy"] = eval_logs["accuracy"]
    if validation is not None:  # read from the PS tasks, as TensorFlow's chief evaluates
        result.update({"val_" + k: v for k, v in
                       model.evaluate(validation, return_dict=True).items()})
    result.update(coordinator.stats())

if args.out:
    model.save(args.out)
if args.out:
    result["out"] = args.out
print(json.dumps(result), flush=True)
