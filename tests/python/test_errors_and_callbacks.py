"""troupe.errors raised for bad models and bad data; callbacks, stop_training, Ctrl-C."""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import zipfile

import numpy as np
import pytest
from conftest import ctr_data, ctr_keras_model

import troupe
import troupe.keras
from troupe import errors


def test_error_classes_are_tensorflows():
    assert issubclass(errors.InvalidArgumentError, errors.OpError)
    assert errors.error_class("invalid_argument") is errors.InvalidArgumentError
    assert errors.error_class("unavailable") is errors.UnavailableError
    assert errors.error_class("cancelled") is errors.CancelledError
    assert errors.error_class("data_loss") is errors.DataLossError
    # Every code of the C++ runtime has its class; none falls through to UnknownError
    # but io_error, which TensorFlow reports as such too.
    for name in troupe._troupe.errc_names():
        cls = errors.error_class(name)
        assert issubclass(cls, errors.OpError)
        assert (cls is errors.UnknownError) == (name == "io_error")


def test_bad_model_files_are_named(tmp_path, ctr_file):
    with pytest.raises(errors.NotFoundError, match="missing.keras"):
        troupe.keras.load_model(tmp_path / "missing.keras")
    damaged = tmp_path / "damaged.keras"
    damaged.write_bytes(open(ctr_file, "rb").read()[:300])
    with pytest.raises(errors.OpError, match="damaged.keras"):
        troupe.keras.load_model(damaged)
    # A zip whose weights file is not HDF5.
    broken = tmp_path / "broken.keras"
    with zipfile.ZipFile(ctr_file) as src, zipfile.ZipFile(broken, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            dst.writestr(item, b"not hdf5" if item.filename.endswith(".h5") else data)
    with pytest.raises(errors.OpError, match="broken.keras"):
        troupe.keras.load_model(broken)


def test_an_unsupported_layer_is_named_before_training():
    import keras

    inp = keras.Input(shape=(5, 3), name="seq")
    out = keras.layers.Dense(1)(keras.layers.LSTM(4, name="recurrent")(inp))
    model = keras.Model(inp, out)
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(errors.InvalidArgumentError, match="LSTM") as e:
        troupe.keras.Model.from_keras(model)
    assert "recurrent" in str(e.value)


def test_bad_arrays_are_named():
    model = troupe.keras.Model.from_keras(ctr_keras_model())
    x, y = ctr_data(64, seed=1)
    with pytest.raises(errors.InvalidArgumentError, match="'item'.*it has dense"):
        model.fit({"dense": x["dense"]}, y, verbose=0)
    with pytest.raises(errors.InvalidArgumentError, match=r"'dense' has shape \(64, 5\)"):
        model.fit({"dense": np.zeros((64, 5), np.float32), "item": x["item"]}, y, verbose=0)
    with pytest.raises(errors.InvalidArgumentError, match="'item'.*integer ids"):
        model.predict({"dense": x["dense"], "item": x["item"] + 0.5})
    with pytest.raises(errors.InvalidArgumentError, match="'item'.*integer ids"):
        model.predict({"dense": x["dense"], "item": np.array(["a"] * 64)})
    with pytest.raises(errors.InvalidArgumentError, match="'label' has 10 examples"):
        model.fit(x, y[:10], verbose=0)
    with pytest.raises(errors.InvalidArgumentError, match="'label'"):
        model.evaluate(x, None)
    with pytest.raises(ValueError, match="2 inputs"):
        model.predict(x["dense"])
    # Ids outside the table are the runtime's error, naming the layer; nothing crashes.
    with pytest.raises(errors.OpError, match="item_emb"):
        model.predict({"dense": x["dense"], "item": x["item"] + 1000})


def test_python_callbacks_are_called_as_keras_calls_them():
    import keras

    model = troupe.keras.Model.from_keras(ctr_keras_model())
    x, y = ctr_data(256, seed=2)
    calls = []

    class Record(keras.callbacks.Callback):  # Keras's own base class
        def on_train_begin(self, logs=None):
            calls.append("begin")

        def on_epoch_end(self, epoch, logs=None):
            calls.append((epoch, sorted(k for k in logs if k in ("auc", "loss"))))
            if epoch == 1:
                self.model.stop_training = True

        def on_train_end(self, logs=None):
            calls.append("end")

    history = model.fit(x, y, batch_size=64, epochs=5, callbacks=[Record()], verbose=0)
    assert calls == ["begin", (0, ["auc", "loss"]), (1, ["auc", "loss"]), "end"]
    assert len(history.history["loss"]) == 2  # stopped after epoch 1

    class Fails(troupe.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 2:
                raise RuntimeError("the callback's own error")

    with pytest.raises(RuntimeError, match="the callback's own error"):
        model.fit(x, y, batch_size=16, epochs=1, callbacks=[Fails()], verbose=0)


def test_troupe_callbacks_run_in_cpp(tmp_path):
    model = troupe.keras.Model.from_keras(ctr_keras_model())
    x, y = ctr_data(256, seed=3)
    vx, vy = ctr_data(128, seed=4)
    cbs = [troupe.keras.callbacks.ModelCheckpoint(tmp_path / "ckpt"),
           troupe.keras.callbacks.TensorBoard(tmp_path / "tb"),
           troupe.keras.callbacks.EarlyStopping(monitor="loss", min_delta=10.0, patience=1),
           troupe.keras.callbacks.BackupAndRestore(tmp_path / "backup")]
    history = model.fit(x, y, batch_size=64, epochs=10, validation_data=(vx, vy),
                        callbacks=cbs, verbose=0)
    # No epoch lowers the loss by 10: stopped once patience ran out.
    assert len(history.history["loss"]) == 2
    assert any(f.startswith("ckpt") for f in os.listdir(tmp_path / "ckpt"))
    assert os.listdir(tmp_path / "tb" / "train")
    assert not os.path.exists(tmp_path / "backup") or not os.listdir(tmp_path / "backup")


CTRL_C_SCRIPT = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from conftest import ctr_data, ctr_keras_model
    import troupe.keras

    model = troupe.keras.Model.from_keras(ctr_keras_model())
    x, y = ctr_data(256, seed=1)

    class Ready(troupe.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 3 and not getattr(self, "said", False):
                self.said = True
                print("training", flush=True)

    try:
        model.fit(x, y, batch_size=8, epochs=100000, callbacks=[Ready()], verbose=0)
        print(json.dumps({"interrupted": False}))
    except KeyboardInterrupt:
        print(json.dumps({"interrupted": True}), flush=True)
        # The model is usable after the interruption.
        print(json.dumps({"predicted": model.predict(x).shape[0]}), flush=True)
""")


def interrupt_when(proc, ready, never, timeout):
    """Sends SIGINT to `proc` (by its id) once ready() says so, and waits for its end
    (bounded: `timeout`); kills it if it outlives the test. Returns (stdout, stderr)."""
    try:
        assert ready(), never + ": " + (proc.stderr.read() if proc.poll() is not None else "")
        os.kill(proc.pid, signal.SIGINT)
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def test_ctrl_c_stops_fit_and_raises_keyboard_interrupt(tmp_path):
    script = tmp_path / "long_fit.py"
    script.write_text(CTRL_C_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), os.path.dirname(__file__)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = interrupt_when(proc, lambda: proc.stdout.readline().strip() == "training",
                              "fit() never trained", timeout=60)
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert {"interrupted": True} in lines, err
    assert {"predicted": 256} in lines, err
    assert proc.returncode == 0, err


WAITING_TASK_SCRIPT = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from conftest import ctr_data, ctr_keras_model
    import troupe, troupe.keras

    role, cluster = sys.argv[2], json.loads(sys.argv[3])
    try:
        if role == "evaluator":  # no checkpoint ever comes: it would wait 600 s
            model = troupe.keras.Model.from_keras(ctr_keras_model())
            data = troupe.data.Dataset.from_tensor_slices(ctr_data(64, seed=1)).batch(16)
            evaluator = troupe.keras.utils.SidecarEvaluator(model, data, sys.argv[4])
            print("waiting", flush=True)
            evaluator.start()
        else:  # no chief ever comes: it would serve forever
            troupe.distribute.Server(cluster, job_name=role, task_index=0).join()
        print(json.dumps({"outcome": "returned"}), flush=True)
    except KeyboardInterrupt:
        print(json.dumps({"outcome": "interrupted"}), flush=True)
""")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accepts(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def listening(proc, port):
    """Whether `proc` came to accept connections on `port` (bounded: 60 s, or its end)."""
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline and not accepts(port):
        time.sleep(0.05)
    return accepts(port)


@pytest.mark.parametrize("role", ["ps", "worker", "evaluator"])
def test_ctrl_c_ends_a_server_join_and_a_sidecar_evaluator(tmp_path, role):
    """Server.join() of a PS or worker task, and SidecarEvaluator.start(), block in C++
    until the job ends; SIGINT (by the process's id) ends them with KeyboardInterrupt."""
    ports = {"chief": free_port(), "ps": free_port(), "worker": free_port()}
    cluster = {job: [f"127.0.0.1:{port}"] for job, port in ports.items()}
    script = tmp_path / "waiting_task.py"
    script.write_text(WAITING_TASK_SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script), os.path.dirname(__file__), role, json.dumps(cluster),
         str(tmp_path / "no_checkpoints")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def started():
        if role == "evaluator":
            return proc.stdout.readline().strip() == "waiting"
        return listening(proc, ports[role])  # serving

    out, err = interrupt_when(proc, started, f"{role} never started waiting", timeout=30)
    assert json.loads(out.splitlines()[-1]) == {"outcome": "interrupted"}, err[-4000:]
    assert proc.returncode == 0, err[-4000:]


CONNECTING_CHIEF_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import troupe
    from troupe.distribute.cluster_resolver import TFConfigClusterResolver

    os.environ["TF_CONFIG"] = json.dumps({"cluster": json.loads(sys.argv[1]),
                                          "task": {"type": "chief", "index": 0}})
    try:  # its PS task never answers: it would retry for 30 s
        troupe.distribute.ParameterServerStrategy(TFConfigClusterResolver())
        print(json.dumps({"outcome": "returned"}), flush=True)
    except KeyboardInterrupt:
        print(json.dumps({"outcome": "interrupted"}), flush=True)
""")


def test_ctrl_c_ends_a_parameter_server_strategy_still_reaching_its_ps(tmp_path):
    """Making a ParameterServerStrategy retries each PS task for up to 30 s, in C++; SIGINT
    (by the process's id) while it retries raises KeyboardInterrupt there, well before."""
    ps = socket.socket()
    ps.bind(("127.0.0.1", 0))
    ps.listen(16)
    ps.settimeout(0.2)
    cluster = {"chief": [f"127.0.0.1:{free_port()}"],
               "ps": [f"127.0.0.1:{ps.getsockname()[1]}"],
               "worker": [f"127.0.0.1:{free_port()}"]}
    tried, done = threading.Event(), threading.Event()

    def refuse():  # closes every connection before its handshake: the chief tries again
        while not done.is_set():
            try:
                conn, _ = ps.accept()
            except OSError:
                continue
            conn.close()
            tried.set()

    refuser = threading.Thread(target=refuse)
    refuser.start()
    script = tmp_path / "connecting_chief.py"
    script.write_text(CONNECTING_CHIEF_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), json.dumps(cluster)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Interrupted within 20 s of the SIGINT, against the 30 s it would retry otherwise.
        out, err = interrupt_when(proc, lambda: tried.wait(60), "the chief never tried its PS",
                                  timeout=20)
    finally:
        done.set()
        refuser.join()
        ps.close()
    assert json.loads(out.splitlines()[-1]) == {"outcome": "interrupted"}, err[-4000:]
    assert proc.returncode == 0, err[-4000:]


MIRRORED_WAITING_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import troupe

    cluster, role = json.loads(sys.argv[1]), sys.argv[2]
    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster,
                                          "task": {"type": role, "index": 0}})
    try:  # the other task never comes: it would wait for 60 s
        troupe.distribute.MultiWorkerMirroredStrategy(connect_timeout_seconds=60)
        print(json.dumps({"outcome": "returned"}), flush=True)
    except KeyboardInterrupt:
        print(json.dumps({"outcome": "interrupted"}), flush=True)
""")


@pytest.mark.parametrize("role", ["chief", "worker"])
def test_ctrl_c_ends_a_mirrored_strategy_whose_ring_is_still_forming(tmp_path, role):
    """Making a MultiWorkerMirroredStrategy waits in C++ until every worker has joined the
    ring: the chief for the others to knock, a worker for the chief to answer. SIGINT (by
    the process's id) while it waits raises KeyboardInterrupt there, well before."""
    ports = {"chief": free_port(), "worker": free_port()}
    cluster = {job: [f"127.0.0.1:{port}"] for job, port in ports.items()}
    script = tmp_path / "forming_ring.py"
    script.write_text(MIRRORED_WAITING_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), json.dumps(cluster), role],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Its ring's door is open before it waits; interrupted within 20 s, against 60.
    out, err = interrupt_when(proc, lambda: listening(proc, ports[role]),
                              f"the {role} never opened its ring's door", timeout=20)
    assert json.loads(out.splitlines()[-1]) == {"outcome": "interrupted"}, err[-4000:]
    assert proc.returncode == 0, err[-4000:]


def test_schedule_refuses_a_python_function_and_names_the_alternatives():
    from troupe.distribute.coordinator import ClusterCoordinator

    coordinator = ClusterCoordinator(strategy=object())  # no cluster needed to refuse

    def my_step(iterator):
        return next(iterator)

    with pytest.raises(errors.InvalidArgumentError, match="my_step is a Python function") as e:
        coordinator.schedule(my_step, args=(None,))
    assert "model.train_step" in str(e.value) and "model.fit()" in str(e.value)
    # A model's step is a reference to C++, run only by a worker.
    model = troupe.keras.Model.from_keras(ctr_keras_model())
    with pytest.raises(errors.InvalidArgumentError, match="scope"):
        coordinator.schedule(model.train_step, args=(None,))
    with pytest.raises(TypeError, match="runs on the workers"):
        model.train_step(None)


def test_tf_config_is_read_as_tensorflow_reads_it(monkeypatch):
    from troupe.distribute.cluster_resolver import TFConfigClusterResolver

    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"chief": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001",
                                                            "127.0.0.1:2002"],
                    "ps": ["127.0.0.1:2003"]},
        "task": {"type": "worker", "index": 1}}))
    r = TFConfigClusterResolver()
    assert (r.task_type, r.task_id) == ("worker", 1)
    assert r.cluster_spec().num_tasks("worker") == 2
    assert r.cluster_spec().task_address("ps", 0) == "127.0.0.1:2003"
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {')
    with pytest.raises(errors.InvalidArgumentError, match="TF_CONFIG"):
        TFConfigClusterResolver()
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["127.0.0.1:2001"]},
                                                "task": {"type": "worker", "index": 3}}))
    with pytest.raises(errors.InvalidArgumentError, match="3"):
        TFConfigClusterResolver()


def test_verbose_prints_keras_progress_lines(capfd):
    """verbose=1: Keras's bar (live on a terminal only) and its epoch line; 2: Keras's line
    per epoch; 0: nothing. On stderr (Troupe's choice: Keras writes them to stdout, which
    Troupe's programs keep for their JSON lines)."""
    model = troupe.keras.Model.from_keras(ctr_keras_model())
    x, y = ctr_data(1000, seed=1)
    capfd.readouterr()
    model.fit(x, y, epochs=2, batch_size=100)
    err = capfd.readouterr().err
    assert err.startswith("Epoch 1/2\n") and "Epoch 2/2\n" in err
    assert "10/10 " + "\u2501" * 20 + " " in err and " - auc: " in err and " - loss: " in err
    model.fit(x, y, epochs=2, batch_size=100, verbose=2)
    err = capfd.readouterr().err
    assert "10/10 - " in err and "/step - auc: " in err and "\u2501" not in err
    model.fit(x, y, epochs=2, batch_size=100, verbose=0)
    assert capfd.readouterr().err == ""


def test_a_lambda_callback_gets_each_batchs_logs():
    """keras.callbacks.LambdaCallback sets on_train_batch_end on the object, not its class:
    fit() still computes the batch's logs for it."""
    import keras

    model = troupe.keras.Model.from_keras(ctr_keras_model())
    x, y = ctr_data(320, seed=2)
    losses = []
    cb = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: losses.append(logs["loss"]))
    history = model.fit(x, y, batch_size=32, epochs=1, callbacks=[cb], verbose=0)
    assert len(losses) == 10 and all(v > 0 for v in losses)
    # Keras's batch logs are the epoch's so far: the last one is the epoch's.
    assert losses[-1] == pytest.approx(history.history["loss"][0], rel=1e-6)
