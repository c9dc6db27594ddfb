"""troupe.distribute in one process: MultiWorkerMirroredStrategy's dataset function and
array sharding (a job of several workers is tests/python/test_examples.py's)."""

import numpy as np
import pytest
from conftest import ctr_data, ctr_keras_model

import troupe
import troupe.keras


@pytest.fixture
def no_cluster(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.delenv("SLURM_PROCID", raising=False)


def test_a_dataset_function_trains_as_the_dataset_it_returns(no_cluster):
    """Without TF_CONFIG the strategy is one replica here; fit() over
    distribute_datasets_from_function gives exactly what fit() over the dataset gives."""
    strategy = troupe.distribute.MultiWorkerMirroredStrategy()
    assert strategy.num_replicas_in_sync == 1 and strategy.is_chief
    x, y = ctr_data(640, seed=5)
    seen = []

    def dataset_fn(ctx):
        seen.append((ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync))
        return (troupe.data.Dataset.from_tensor_slices((x, y))
                .shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
                .batch(ctx.get_per_replica_batch_size(64)))

    keras_model = ctr_keras_model()
    with strategy.scope():
        a = troupe.keras.Model.from_keras(keras_model)
    b = troupe.keras.Model.from_keras(keras_model)
    ha = a.fit(strategy.distribute_datasets_from_function(dataset_fn), epochs=2, verbose=0)
    hb = b.fit(troupe.data.Dataset.from_tensor_slices((x, y)).batch(64), epochs=2, verbose=0)
    assert set(seen) == {(1, 0, 1)}
    assert ha.history["loss"] == hb.history["loss"]
    assert ha.history["loss"][1] < ha.history["loss"][0]
    np.testing.assert_array_equal(a.predict(x), b.predict(x))


def test_arrays_shard_by_example_and_a_batch_must_divide(no_cluster):
    """shard(n, i) keeps examples i, i + n, ...: two shards together are every example."""
    model = troupe.keras.Model.from_keras(ctr_keras_model())
    x, y = ctr_data(101, seed=6)
    steps = [model.fit(troupe.data.Dataset.from_tensor_slices((x, y)).shard(2, i).batch(10),
                       epochs=1, verbose=0).stats["steps"] for i in range(2)]
    assert steps == [6, 5]  # 51 examples in 6 batches, 50 in 5
    ctx = troupe.distribute.InputContext(3, 0, 3)
    with pytest.raises(ValueError, match="not divisible by num_replicas_in_sync"):
        ctx.get_per_replica_batch_size(64)


def test_a_dataset_function_that_raises_is_named(no_cluster):
    strategy = troupe.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = troupe.keras.Model.from_keras(ctr_keras_model())

    x, y = ctr_data(64, seed=7)
    calls = []

    def broken(ctx):  # fit() asks first for its checks, then from C++ for the replica's
        calls.append(ctx)
        if len(calls) > 1:
            raise error
        return troupe.data.Dataset.from_tensor_slices((x, y)).batch(32)

    error = OSError("no such shard")
    with pytest.raises(troupe.errors.InvalidArgumentError,
                       match="dataset function raised OSError: no such shard"):
        model.fit(strategy.distribute_datasets_from_function(broken), epochs=1, verbose=0)
    assert len(calls) == 2
    # Ctrl-C inside the function, called from C++, stops fit() as Ctrl-C anywhere else does.
    calls.clear()
    error = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        model.fit(strategy.distribute_datasets_from_function(broken), epochs=1, verbose=0)
    assert len(calls) == 2
