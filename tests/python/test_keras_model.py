"""troupe.keras: a Keras model trained by Troupe, NumPy in and out, back to Keras."""

import numpy as np
import pytest
from conftest import ctr_data, ctr_keras_model

import troupe
import troupe.keras


def relative_close(a, b, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


def test_loads_a_keras_file_and_predicts_what_keras_predicts(ctr_file):
    import keras

    model = troupe.keras.load_model(ctr_file)
    assert sorted(model.input_names) == ["dense", "item"]
    assert model.output_names == ["click"]
    assert model.label_names == ["label"]
    x, _ = ctr_data(300, seed=3)
    ours = model.predict(x, batch_size=64)
    theirs = keras.saving.load_model(ctr_file).predict(x, verbose=0)
    assert ours.shape == (300, 1) and ours.dtype == np.float32
    relative_close(ours, theirs)


def test_fit_learns_and_the_result_goes_back_to_keras(tmp_path):
    import keras

    reference = ctr_keras_model()
    model = troupe.keras.Model.from_keras(reference)  # the same initial weights
    initial = reference.get_layer("click").get_weights()[0].copy()
    x, y = ctr_data(2000, seed=1)
    vx, vy = ctr_data(500, seed=2)
    history = model.fit(x, y, batch_size=32, epochs=3, validation_data=(vx, vy), verbose=0,
                        shuffle=False)
    assert history.epoch == [0, 1, 2]
    assert set(history.history) >= {"loss", "auc", "val_loss", "val_auc"}
    assert history.history["loss"][-1] < history.history["loss"][0]
    # Keras trains the same model on the same batches in the same order (SGD, no
    # shuffling): the same metrics and, within float32 rounding, the same weights.
    theirs = reference.fit(x, y, batch_size=32, epochs=3, validation_data=(vx, vy),
                           verbose=0, shuffle=False).history
    for key in ("loss", "val_loss", "auc", "val_auc"):
        np.testing.assert_allclose(history.history[key], theirs[key], rtol=1e-4)
    relative_close(model.predict(vx), reference.predict(vx, verbose=0), rtol=1e-4, atol=1e-5)
    logs = model.evaluate(vx, vy, return_dict=True)
    assert logs["loss"] == pytest.approx(history.history["val_loss"][-1], rel=1e-5)

    # The trained model back in Keras: a file, and a live model, predicting as Troupe does.
    ours = model.predict(vx)
    model.save(tmp_path / "trained.keras")
    relative_close(keras.saving.load_model(tmp_path / "trained.keras").predict(vx, verbose=0),
                   ours)
    relative_close(model.to_keras().predict(vx, verbose=0), ours)
    trained = model.get_weights()
    assert trained["item_emb/embeddings"].shape == (50, 8)
    assert not np.allclose(trained["click/kernel"], initial)
    relative_close(trained["click/kernel"], reference.get_layer("click").get_weights()[0],
                   rtol=1e-4, atol=1e-5)


def test_compile_overrides_the_file_and_keeps_the_weights(tmp_path):
    import keras

    model = troupe.keras.Model.from_keras(ctr_keras_model(compile=False))
    # A model saved without compile() is written back without compile settings.
    model.save(tmp_path / "plain.keras")
    assert getattr(keras.saving.load_model(tmp_path / "plain.keras"), "optimizer", None) is None
    x, y = ctr_data(512, seed=4)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="binary_crossentropy",
                  metrics=["accuracy"])
    model.fit(x, y, batch_size=64, epochs=1, verbose=0)
    before = model.predict(x)
    model.compile(optimizer="sgd", loss="binary_crossentropy", metrics=["auc"])
    relative_close(model.predict(x), before)  # compile() keeps the trained weights
    history = model.fit(x, y, batch_size=64, epochs=1, verbose=0)
    assert "auc" in history.history and "accuracy" not in history.history
    # The file carries the last compile()'s settings, as Keras's compile() then save().
    model.save(tmp_path / "compiled.keras")
    back = keras.saving.load_model(tmp_path / "compiled.keras")
    assert type(back.optimizer).__name__ == "SGD"
    assert troupe.keras.load_model(tmp_path / "compiled.keras").fit(
        x, y, batch_size=64, epochs=1, verbose=0).history.keys() == {"loss", "auc",
                                                                    "epoch_s",
                                                                    "examples_per_sec"}


def test_a_dataset_of_tfrecord_files(tmp_path):
    import tfrecord

    x, y = ctr_data(1024, seed=5)
    for i in range(2):
        part = slice(i * 512, (i + 1) * 512)
        tfrecord.write(str(tmp_path / f"train-{i}.tfrecord"),
                       {"dense": x["dense"][part], "item": x["item"][part],
                        "label": y[part]})
    files = [str(tmp_path / f"train-{i}.tfrecord") for i in range(2)]
    model = troupe.keras.Model.from_keras(ctr_keras_model())
    ds = troupe.data.TFRecordDataset(files).shuffle(256, seed=3).batch(32).repeat()
    history = model.fit(ds, epochs=2, steps_per_epoch=40, verbose=0)
    assert len(history.history["loss"]) == 2
    assert model._core.steps == 80
    # The same examples from files and from arrays evaluate alike.
    from_files = model.evaluate(troupe.data.TFRecordDataset(files).batch(100), return_dict=True)
    from_arrays = model.evaluate(x, y, batch_size=100, return_dict=True)
    assert from_files["loss"] == pytest.approx(from_arrays["loss"], rel=1e-5)
    assert from_files["auc"] == pytest.approx(from_arrays["auc"], abs=1e-6)
    # A dataset that repeats forever needs steps_per_epoch, as in Keras.
    with pytest.raises(ValueError, match="steps_per_epoch"):
        model.fit(ds, epochs=1, verbose=0)
    # One shard of two reads half of the examples: its one pass is half as many steps.
    model.fit(troupe.data.TFRecordDataset(files).shard(2, 1).batch(32), epochs=1, verbose=0)
    assert model._core.steps == 16


def test_from_tensor_slices_shuffles_each_epoch_and_keeps_every_example():
    x, y = ctr_data(100, seed=6)
    model = troupe.keras.Model.from_keras(ctr_keras_model())
    batches = []

    class Count(troupe.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            batches.append([])

        def on_train_batch_end(self, batch, logs=None):
            batches[-1].append(batch)

    ds = troupe.data.Dataset.from_tensor_slices((x, y)).shuffle(100, seed=1).batch(30)
    model.fit(ds, epochs=2, callbacks=[Count()], verbose=0)
    # 30, 30, 30, 10: the last batch is kept, as Keras keeps it; Keras's batch indices.
    assert batches == [[0, 1, 2, 3], [0, 1, 2, 3]]
    assert model._core.steps == 8


def test_an_uncompiled_model_predicts_and_trains_once_compiled():
    import keras

    kmodel = ctr_keras_model(compile=False)
    model = troupe.keras.Model.from_keras(kmodel)
    x, y = ctr_data(128, seed=7)
    relative_close(model.predict(x), kmodel.predict(x, verbose=0))
    with pytest.raises(RuntimeError, match="compile"):
        model.fit(x, y, verbose=0)
    with pytest.raises(RuntimeError, match="compile"):
        model.evaluate(x, y)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="binary_crossentropy")
    assert model.fit(x, y, epochs=2, verbose=0).history["loss"][1] > 0


def test_predict_and_evaluate_release_the_gil():
    import os
    import sys
    import threading
    import time

    model = troupe.keras.Model.from_keras(ctr_keras_model())
    x, y = ctr_data(1_000_000, seed=8)  # a call of a few tenths of a second
    turns = []  # when the other thread ran
    stop = threading.Event()

    def spin():  # gives the GIL up at every turn: it runs only when no one else holds it
        while not stop.is_set():
            turns.append(time.monotonic())
            os.sched_yield()

    # No forced switch during a call: a thread runs only when the caller lets the GIL go.
    previous = sys.getswitchinterval()
    sys.setswitchinterval(60.0)
    thread = threading.Thread(target=spin)
    thread.start()
    try:
        middles = []
        for call in (lambda: model.predict(x, batch_size=256),
                     lambda: model.evaluate(x, y, batch_size=256)):
            t0 = time.monotonic()
            call()
            t1 = time.monotonic()
            # Held, the GIL changes hands only as a call starts and ends; released, the
            # other thread runs all along, however busy the machine: count its turns in the
            # middle half of the call.
            lo, hi = t0 + 0.25 * (t1 - t0), t0 + 0.75 * (t1 - t0)
            middles.append(sum(1 for t in turns if lo < t < hi))
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(previous)
    assert min(middles) > 0, middles
