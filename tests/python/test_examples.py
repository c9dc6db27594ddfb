"""examples/python under `troupe launch`: real processes on 127.0.0.1, a worker killed."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import troupe
import troupe.keras

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
BIN = os.environ.get("TROUPE_BIN_DIR", "")
FIXTURES = os.environ.get("TROUPE_KERAS_FIXTURES", "")


def run_launch(args, timeout):
    """Runs `troupe launch` in its own process group; on a timeout ends the group (the
    launcher and the tasks it started) by the launcher's id. Returns (code, output, last
    JSON line)."""
    proc = subprocess.Popen([os.path.join(BIN, "troupe"), "launch"] + args,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"troupe launch ran past {timeout} s:\n{out[-4000:]}")
    last = {}
    for line in out.splitlines():
        if line.startswith("{"):
            try:
                last = json.loads(line)
            except ValueError:
                pass
    return proc.returncode, out, last


def launch_and_signal(args, run_dir, signals, timeout):
    """Runs `troupe launch --run-dir run_dir ARGS` in its own process group; for each
    (ready, task, sig) of `signals` in turn, waits (bounded: 120 s, or launch ending) until
    ready() holds and sends `sig` to `task` ("type:index") by the id tasks.json lists; then
    waits for launch. On a failure ends the group by the launcher's id. Returns (code,
    output, launch's JSON line)."""
    launch = subprocess.Popen(
        [os.path.join(BIN, "troupe"), "launch", "--run-dir", str(run_dir)] + args,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        for ready, task, sig in signals:
            deadline = time.monotonic() + 120
            while launch.poll() is None and time.monotonic() < deadline and not ready():
                time.sleep(0.1)  # bounded: the deadline, or launch ending
            assert ready(), f"never ready to signal {task}"
            kind, index = task.split(":")
            tasks = json.loads((run_dir / "tasks.json").read_text())
            os.kill(next(t["pid"] for t in tasks
                         if t["type"] == kind and t["index"] == int(index)), sig)
        out, _ = launch.communicate(timeout=timeout)
    except BaseException:
        os.killpg(launch.pid, signal.SIGKILL)
        launch.communicate()
        raise
    assert launch.returncode == 0, out[-4000:]
    return launch.returncode, out, json.loads(
        [line for line in out.splitlines() if line.startswith("{")][-1])


def log_has(path, text):
    return lambda: path.exists() and text in path.read_text()


@pytest.mark.skipif(not BIN or not FIXTURES, reason="TROUPE_BIN_DIR and TROUPE_KERAS_FIXTURES "
                    "(set by CTest) name the launcher and the Keras fixtures")
@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_the_ps_tutorial_trains_as_a_job_and_survives_a_killed_worker(tmp_path, loop):
    f = os.path.join(FIXTURES, "models", "ps_tutorial")
    trained = str(tmp_path / "trained.keras")
    # The fit loop's job has the tutorial's side-car evaluator following its checkpoints.
    evaluator = ["--evaluator"] if loop == "fit" else []
    code, out, last = run_launch(
        ["--ps", "2", "--workers", "2", "--restart-failed", "--chaos", "kill:worker:1@3s",
         "--run-dir", str(tmp_path / "run")] + evaluator + ["--", sys.executable,
         os.path.join(ROOT, "examples", "python", "ps_tutorial.py"),
         "--model", os.path.join(f, "model.keras"),
         "--data", os.path.join(f, "train.tfrecord"),
         "--validation", os.path.join(f, "test.tfrecord"),
         "--epochs", "10", "--steps-per-epoch", "4000", "--batch", "32", "--out", trained,
         "--loop", loop],
        timeout=400)
    assert code == 0, out[-4000:]
    chief = last["chief"]
    assert chief["ok"] is True and chief["epochs_run"] == 10 and chief["loop"] == loop
    assert chief["steps"] == 40000
    assert chief["workers_lost"] >= 1 and chief["worker_rejoins"] >= 1, out[-4000:]
    assert last["injections"] == 1
    assert chief["val_accuracy"] > 0.8
    if loop == "custom":
        # The inline evaluation (model.evaluate_step on the workers, 32 batches of 8, the
        # results merged) scores the trained model as the chief's evaluate() does.
        assert chief["inline_val_accuracy"] > 0.8
        assert abs(chief["inline_val_accuracy"] - chief["val_accuracy"]) < 0.05
        assert chief["closures_completed"] == 40000 + 32
    if loop == "fit":
        # It scored checkpoints as they came (it may skip some) and the last one as the
        # chief scored its model at the end.
        lines = last["evaluator"]
        summary = lines[-1]
        assert summary["task"] == "evaluator" and summary["last_step"] == 40000, lines
        assert 1 <= summary["evaluations"] == len(lines) - 1 <= 10
        assert [e["step"] for e in lines[:-1]] == sorted({e["step"] for e in lines[:-1]})
        assert all("test_accuracy" not in e for e in lines)  # Keras's names only
        assert summary["accuracy"] == pytest.approx(chief["val_accuracy"], abs=1e-9)
        assert summary["loss"] == pytest.approx(chief["val_loss"], rel=1e-5)
    # What the PS tasks held at the end is what was saved: the file scores the validation
    # data as the chief's last evaluation did.
    model = troupe.keras.load_model(trained)
    logs = model.evaluate(troupe.data.TFRecordDataset([os.path.join(f, "test.tfrecord")])
                          .batch(256), return_dict=True)
    assert logs["accuracy"] == pytest.approx(chief["val_accuracy"], abs=1e-9)
    assert logs["loss"] == pytest.approx(chief["val_loss"], rel=1e-5)
    # And predicts from NumPy strings as it was trained from the files' bytes.
    inputs = dict(np.load(os.path.join(f, "test_inputs.npz")))
    p = model.predict(inputs, batch_size=64)
    assert p.shape == (len(inputs["features"]), 1) and np.all((p >= 0) & (p <= 1))


FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


@pytest.mark.skipif(not BIN or not os.path.isdir(FASHION_MNIST),
                    reason="TROUPE_BIN_DIR (set by CTest) names the launcher; Debian's "
                    "dataset-fashion-mnist is the data")
def test_the_mwms_tutorial_trains_on_every_worker_and_takes_a_killed_one_back(tmp_path):
    """Every worker runs the script; worker 1 is killed by its id once the chief has saved
    its first epoch's checkpoint, restarted by troupe launch, runs the script again and
    rejoins: every worker ends at the same step with the same weights."""
    run_dir = tmp_path / "run"
    checkpoint = run_dir / "ckpt" / "model.keras"
    _, out, last = launch_and_signal(
        ["--workers", "2", "--restart-failed", "--", sys.executable,
         os.path.join(ROOT, "examples", "python", "mwms_tutorial.py"), "--elastic",
         "--epochs", "5", "--steps-per-epoch", "150"],
        run_dir, [(checkpoint.exists, "worker:1", signal.SIGKILL)], timeout=240)
    assert last["restarts"] == 1
    chief = last["chief"]
    assert chief["task"] == "worker:0" and chief["is_chief"] is True
    assert chief["epochs_run"] == 5 and chief["steps"] == 750
    assert chief["workers_lost"] == 1 and chief["workers_joined"] == 1, out[-4000:]
    assert chief["train_accuracy"] > 0.8 and chief["test_accuracy"] > 0.8
    # The restarted worker began from the others' state and ended with the same weights.
    worker = json.loads([line for line in (run_dir / "worker-1.log").read_text().splitlines()
                         if line.startswith("{")][-1])
    assert worker["steps"] == 750 and 0 < worker["steps_run"] < 750
    assert worker["test_accuracy"] == chief["test_accuracy"]
    assert worker["loss"] == chief["loss"]
    # The tutorial's files: the chief's checkpoint, no worker's temporary directory left.
    assert sorted(os.listdir(run_dir / "ckpt")) == ["model.keras"]
    for t in last["tasks"]:
        assert t["exit"] == 0


# A PS job's script: its PS and worker tasks serve, and only the chief goes on.
SERVE = r'''resolver = troupe.distribute.cluster_resolver.TFConfigClusterResolver()
if resolver.task_type in ("worker", "ps"):
    troupe.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                             task_index=resolver.task_id).join()
    sys.exit(0)
'''

INTERRUPTED_CHIEF = r'''
import json, sys
import troupe, troupe.keras

{serve}model_file, train, test = sys.argv[1:4]
strategy = troupe.distribute.ParameterServerStrategy(resolver)
with strategy.scope():
    model = troupe.keras.load_model(model_file)
data = troupe.data.TFRecordDataset([train]).batch(32).repeat()
try:
    model.fit(data, epochs=1000, steps_per_epoch=1000, verbose=2)
    print(json.dumps({"interrupted": False}), flush=True)
except KeyboardInterrupt:
    # The variables on the PS tasks are usable after the interruption.
    logs = model.evaluate(troupe.data.TFRecordDataset([test]).batch(256), return_dict=True)
    print(json.dumps({"ok": True, "interrupted": True, "steps": model._core.steps,
                      "accuracy": logs["accuracy"]}), flush=True)
'''.replace("{serve}", SERVE)


@pytest.mark.skipif(not BIN or not FIXTURES, reason="TROUPE_BIN_DIR and TROUPE_KERAS_FIXTURES "
                    "(set by CTest) name the launcher and the Keras fixtures")
def test_ctrl_c_stops_a_strategys_fit_at_its_next_point_and_the_job_ends(tmp_path):
    """SIGINT to the chief of a PS job (by its id) stops fit() at the next 100-step point,
    where no closure is in flight: KeyboardInterrupt, the PS tasks' variables usable, and
    every task ends when the chief's interpreter exits."""
    f = os.path.join(FIXTURES, "models", "ps_tutorial")
    script = tmp_path / "interrupted.py"
    script.write_text(INTERRUPTED_CHIEF)
    run_dir = tmp_path / "run"
    # Training is under way once its second epoch has begun (verbose=2's header).
    _, out, last = launch_and_signal(
        ["--ps", "1", "--workers", "2", "--", sys.executable, str(script),
         os.path.join(f, "model.keras"), os.path.join(f, "train.tfrecord"),
         os.path.join(f, "test.tfrecord")],
        run_dir, [(log_has(run_dir / "chief-0.log", "Epoch 2/1000"), "chief:0", signal.SIGINT)],
        timeout=120)
    result = last["chief"]
    assert result["interrupted"] is True, out[-4000:]
    assert 1000 <= result["steps"] < 1000 * 1000 and result["steps"] % 100 == 0
    assert result["accuracy"] > 0.5
    for t in last["tasks"]:
        assert t["exit"] == 0, t


INTERRUPTED_REPLICA = r'''
import json, sys
import numpy as np
import troupe, troupe.keras
from troupe import errors

model_file = sys.argv[1]
strategy = troupe.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = troupe.keras.load_model(model_file)
rng = np.random.default_rng(0)
x = rng.normal(size=(4096, 4)).astype(np.float32)
items = rng.integers(0, 50, size=4096)
y = (x[:, 0] > 0).astype(np.float32)
data = troupe.data.Dataset.from_tensor_slices(({"dense": x, "item": items}, y)).batch(64)
try:
    model.fit(data.repeat(), epochs=1000, steps_per_epoch=200, verbose=2)
    outcome = "finished"
except KeyboardInterrupt:
    outcome = "interrupted"
except errors.CancelledError as e:
    outcome = "cancelled: " + str(e)
print(json.dumps({"ok": True, "outcome": outcome, "steps": model._core.steps}), flush=True)
'''


@pytest.mark.skipif(not BIN, reason="TROUPE_BIN_DIR (set by CTest) names the launcher")
def test_ctrl_c_on_one_mirrored_worker_stops_every_worker_at_the_same_point(tmp_path, ctr_file):
    """SIGINT to worker 1 of a MultiWorkerMirroredStrategy job: it raises KeyboardInterrupt
    at the next 100-step point, the points being agreed, worker 0 stops there too with a
    CancelledError naming worker 1, and both end at the same step."""
    script = tmp_path / "interrupted.py"
    script.write_text(INTERRUPTED_REPLICA)
    run_dir = tmp_path / "run"
    log = run_dir / "worker-1.log"
    _, out, last = launch_and_signal(
        ["--workers", "2", "--", sys.executable, str(script), ctr_file],
        run_dir, [(log_has(log, "Epoch 2/1000"), "worker:1", signal.SIGINT)], timeout=120)
    chief = last["chief"]
    other = json.loads([line for line in log.read_text().splitlines()
                        if line.startswith("{")][-1])
    assert other["outcome"] == "interrupted", out[-4000:]
    assert chief["outcome"].startswith("cancelled: ") and "[1]" in chief["outcome"], chief
    assert chief["steps"] == other["steps"] and chief["steps"] % 100 == 0
    assert 200 <= chief["steps"] < 200 * 1000


EXTENSION_JOB = r'''
import json, sys
import troupe, troupe.keras
import troupe_test_steps  # noqa: F401  (adds "test/label_mean" to every task's registry)
from troupe import errors
from troupe.distribute.coordinator import ClusterCoordinator, merge_results

{serve}model_file, train = sys.argv[1:3]
strategy = troupe.distribute.ParameterServerStrategy(resolver)
with strategy.scope():
    model = troupe.keras.load_model(model_file)
coordinator = ClusterCoordinator(strategy)
it = iter(coordinator.create_per_worker_dataset(troupe.data.TFRecordDataset([train]).batch(32)))
values = [coordinator.schedule(model.registered_step("test/label_mean"), args=(it,))
          for _ in range(40)]
coordinator.join()
means = [v.fetch()["loss"] for v in values]
try:
    coordinator.schedule(model.registered_step("test/no_such_step"), args=(it,)).fetch()
    unknown = "ran"
except errors.OpError as e:
    unknown = type(e).__name__ + ": " + str(e)
print(json.dumps({"ok": True, "means": means, "merged": merge_results(values)["loss"],
                  "unknown": unknown}), flush=True)
'''.replace("{serve}", SERVE)


@pytest.mark.skipif(not BIN or not FIXTURES, reason="TROUPE_BIN_DIR and TROUPE_KERAS_FIXTURES "
                    "(set by CTest) name the launcher and the Keras fixtures")
def test_a_step_a_cpp_extension_registers_runs_on_the_workers(tmp_path):
    """tests/python/ext's module adds a step to every task's registry when imported; the
    chief schedules it by name on the model's per-worker dataset."""
    import troupe_test_steps  # noqa: F401  (built with the tests: it must load)
    f = os.path.join(FIXTURES, "models", "ps_tutorial")
    script = tmp_path / "extension_job.py"
    script.write_text(EXTENSION_JOB)
    code, out, last = run_launch(
        ["--ps", "1", "--workers", "2", "--run-dir", str(tmp_path / "run"), "--",
         sys.executable, str(script), os.path.join(f, "model.keras"),
         os.path.join(f, "train.tfrecord")], timeout=120)
    assert code == 0, out[-4000:]
    result = last["chief"]
    means = result["means"]
    # Each is a batch's mean of 32 labels of 0 and 1, read on a worker from the file.
    assert len(means) == 40 and all(0 <= m <= 1 for m in means)
    assert all(abs(m * 32 - round(m * 32)) < 1e-9 for m in means)
    assert len(set(means)) > 1
    assert result["merged"] == pytest.approx(sum(means) / len(means))
    assert result["unknown"].startswith("NotFoundError") and "test/no_such_step" in \
        result["unknown"], result["unknown"]


WAITING_CHIEF = r'''
import json, sys, time
import troupe, troupe.keras
import troupe_test_steps  # noqa: F401  (adds "test/wait_until_cancelled" to every registry)
from troupe import errors
from troupe.distribute.coordinator import ClusterCoordinator

{serve}strategy = troupe.distribute.ParameterServerStrategy(resolver)
with strategy.scope():
    model = troupe.keras.load_model(sys.argv[1])
coordinator = ClusterCoordinator(strategy)
it = iter(coordinator.create_per_worker_dataset(troupe.data.TFRecordDataset([sys.argv[2]])))
# Runs a minute unless cancelled: join() and fetch() wait on it until a SIGINT.
waiting = coordinator.schedule(model.registered_step("test/wait_until_cancelled"), args=(it,))
result = {"ok": True}
for call, wait in (("join", coordinator.join), ("fetch", waiting.fetch)):
    t0 = time.monotonic()
    try:
        print(f"in {call}", file=sys.stderr, flush=True)  # chief-0.log, written as it comes
        wait()
        result[call] = "returned"
    except KeyboardInterrupt:
        result[call] = "interrupted"
    result[call + "_s"] = time.monotonic() - t0
# A failing closure cancels the waiting one; join() raises its error.
coordinator.schedule(model.registered_step("test/no_such_step"), args=(it,))
try:
    coordinator.join()
except errors.NotFoundError:
    result["after"] = "not found raised"
try:
    waiting.fetch()
except errors.CancelledError:
    result["waiting"] = "cancelled"
print(json.dumps(result), flush=True)
'''.replace("{serve}", SERVE)


@pytest.mark.skipif(not BIN or not FIXTURES, reason="TROUPE_BIN_DIR and TROUPE_KERAS_FIXTURES "
                    "(set by CTest) name the launcher and the Keras fixtures")
def test_ctrl_c_reaches_a_chief_waiting_in_join_or_fetch(tmp_path):
    """SIGINT to a chief blocked in coordinator.join(), then in RemoteValue.fetch(), on a
    closure that runs a minute: each raises KeyboardInterrupt within seconds, the
    coordinator stays usable, and the job ends cleanly."""
    f = os.path.join(FIXTURES, "models", "ps_tutorial")
    script = tmp_path / "waiting_chief.py"
    script.write_text(WAITING_CHIEF)
    run_dir = tmp_path / "run"
    log = run_dir / "chief-0.log"
    _, out, last = launch_and_signal(
        ["--ps", "1", "--workers", "2", "--", sys.executable, str(script),
         os.path.join(f, "model.keras"), os.path.join(f, "train.tfrecord")], run_dir,
        [(log_has(log, f"in {call}"), "chief:0", signal.SIGINT) for call in ("join", "fetch")],
        timeout=120)
    result = last["chief"]
    assert result["join"] == "interrupted" and result["fetch"] == "interrupted", result
    # Well before the minute the closure would run: the signal was seen while waiting.
    assert result["join_s"] < 30 and result["fetch_s"] < 30, result
    assert result["after"] == "not found raised" and result["waiting"] == "cancelled", result
    for t in last["tasks"]:
        assert t["exit"] == 0, t


UNSHARDED_FUNCTION = r'''
import json, sys
import numpy as np
import troupe, troupe.keras

strategy = troupe.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = troupe.keras.load_model(sys.argv[1])
rng = np.random.default_rng(0)
x = {"dense": rng.normal(size=(128, 4)).astype(np.float32), "item": rng.integers(0, 50, 128)}
y = (x["dense"][:, 0] > 0).astype(np.float32)
contexts = []


def dataset_fn(ctx):  # every worker reads all 128 examples: no shard() here
    contexts.append([ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync])
    return troupe.data.Dataset.from_tensor_slices((x, y)).batch(32)


h = model.fit(strategy.distribute_datasets_from_function(dataset_fn), epochs=1, verbose=0)
print(json.dumps({"ok": True, "steps": h.stats["steps"], "contexts": contexts}), flush=True)
'''


@pytest.mark.skipif(not BIN, reason="TROUPE_BIN_DIR (set by CTest) names the launcher")
def test_a_dataset_function_is_not_sharded_again(tmp_path, ctr_file):
    """Two workers, a dataset function that does not shard: each worker trains on what it
    returns (128 examples: 4 batches), not on a shard of it, as TensorFlow's
    distribute_datasets_from_function; the function saw each worker's InputContext."""
    script = tmp_path / "unsharded.py"
    script.write_text(UNSHARDED_FUNCTION)
    code, out, last = run_launch(["--workers", "2", "--run-dir", str(tmp_path / "run"), "--",
                                  sys.executable, str(script), ctr_file], timeout=120)
    assert code == 0, out[-4000:]
    assert last["chief"]["steps"] == 4, out[-4000:]
    assert [2, 0, 2] in last["chief"]["contexts"]
