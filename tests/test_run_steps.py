"""The steps of `tfformer.run.train`, each alone and without training."""

import contextlib
import dataclasses
import json
import logging
import os
import types

import pytest

from tfformer import run
from tfformer.config import TransformerConfig
from tfformer.data.batching import BatchStats
from tfformer.train import inputs
from tfformer.train import steps as run_steps
from tfformer.train.callbacks import (
    DevBleu,
    KeepLastCheckpoints,
    LogBatchShapes,
    LogDataCounters,
    LogThroughput,
    StopAtTime,
    StopOnNaN,
)
from tfformer.train.devices import Placement
from tfformer.train.settings import Budget, TrainingStopped, TrainSettings, load_config
from tfformer.utils.run_dir import RunDir

SMALL = load_config("tiny", vocab_size=40, d_model=16, num_heads=2, d_ff=16)


def placement(chief=True, task_id=0):
    strategy = types.SimpleNamespace(cluster_resolver=types.SimpleNamespace(task_id=task_id))
    return Placement(scope=contextlib.nullcontext, replicas=1, chief=chief, num_workers=1,
                     worker_index=task_id, description="one device", strategy=strategy)


def test_max_minutes_is_refused_for_several_workers_before_anything_starts(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["a:1", "b:2"]},
                                                "task": {"type": "worker", "index": 0}}))
    with pytest.raises(ValueError, match="max_minutes works in one process only"):
        run.place_devices(TrainSettings(max_minutes=1))


def test_a_worker_writes_its_own_files_under_the_run(tmp_path):
    shared, own = run_steps.run_dirs(tmp_path / "r", placement())
    assert shared == own == RunDir(tmp_path / "r") and os.path.isdir(own.path)
    shared, own = run_steps.run_dirs(tmp_path / "r", placement(chief=False, task_id=2))
    assert own.path == os.path.join(shared.path, "worker-2") and os.path.isdir(own.path)


def test_a_new_run_records_its_settings_then_its_config(tmp_path):
    out = RunDir(tmp_path)
    run_steps.check_or_record_config(out, SMALL, TrainSettings(steps=7), chief=False)
    assert not os.listdir(tmp_path)  # only the chief writes the run's files
    run_steps.check_or_record_config(out, SMALL, TrainSettings(steps=7), chief=True)
    assert TransformerConfig.from_json((tmp_path / "config.json").read_text()) == SMALL
    assert json.loads((tmp_path / "train_args.json").read_text())["steps"] == 7


def test_a_resumed_run_refuses_another_architecture_naming_the_field(tmp_path, caplog):
    out = RunDir(tmp_path)
    run_steps.check_or_record_config(out, SMALL, TrainSettings(), chief=True)
    with pytest.raises(ValueError, match=r"config.json differs from this command's config in "
                                         r"d_ff: 16 -> 32: the saved weights would not fit"):
        run_steps.check_or_record_config(out, SMALL.replace(d_ff=32), TrainSettings(), True)
    with caplog.at_level(logging.INFO, logger="tfformer.run"):
        run_steps.check_or_record_config(out, SMALL.replace(dropout=0.3), TrainSettings(), True)
    assert "resuming with dropout: 0.1 -> 0.3" in caplog.text
    assert TransformerConfig.from_json((tmp_path / "config.json").read_text()) == SMALL


def test_dev_sources_are_kept_once_one_per_line(tmp_path):
    out = RunDir(tmp_path)
    pairs = [(f"fuente {i}\nsigue", f"source {i}") for i in range(20)]
    run_steps.keep_dev_sources(out, pairs)
    lines = (tmp_path / "dev_sources.txt").read_text().splitlines()
    assert lines[0] == "fuente 0 sigue" and len(lines) == run_steps.DEV_SOURCES_KEPT == 16
    run_steps.keep_dev_sources(out, [("otra", "other")])
    assert (tmp_path / "dev_sources.txt").read_text().splitlines() == lines


def make_callbacks(tmp_path, settings, chief=True, deadline=None):
    data = types.SimpleNamespace(tokenizer=object(), dev=types.SimpleNamespace(
        pairs=[("hola", "hello")]))
    batches = inputs.RunBatches(train=None, dev=None, batches_per_pass=None,
                                  counters=inputs.Counters(), stats=BatchStats())
    budget = Budget(total_steps=10, steps_per_epoch=5, deadline=deadline)
    return run_steps.make_callbacks(settings, RunDir(tmp_path), data, batches, 64,
                                    "tensorflow", chief, budget)


def test_callbacks_of_a_default_run(tmp_path):
    callbacks = make_callbacks(tmp_path, TrainSettings(keep_checkpoints=3))
    assert [type(c) for c in callbacks.all] == [
        StopOnNaN, KeepLastCheckpoints, LogDataCounters,
        LogBatchShapes, LogThroughput, DevBleu]
    assert callbacks.all[1].keep == 3 and callbacks.all[3] is callbacks.batch_shapes
    assert callbacks.stop_at_time is None


@pytest.mark.parametrize("settings, chief", [(TrainSettings(dev_sentences=0), True),
                                             (TrainSettings(), False)],
                         ids=["no-dev-sentences", "not-chief"])
def test_only_the_chief_decodes_dev_sentences(tmp_path, settings, chief):
    callbacks = make_callbacks(tmp_path, settings, chief)
    assert not [c for c in callbacks.all if isinstance(c, DevBleu)]


def test_a_deadline_stops_training_last(tmp_path):
    callbacks = make_callbacks(tmp_path, TrainSettings(max_minutes=1), deadline=123.0)
    assert callbacks.all[-1] is callbacks.stop_at_time
    assert isinstance(callbacks.stop_at_time, StopAtTime)
    assert callbacks.stop_at_time.deadline == 123.0


def test_the_model_is_compiled_with_the_runs_warmup_and_accumulation():
    settings = TrainSettings(grad_accum=2, lr_scale=0.5, label_smoothing=0.2)
    model = run_steps.build_model(SMALL, settings, placement(), "tensorflow", warmup_steps=7)
    schedule = model.optimizer._learning_rate
    assert (schedule.warmup_steps, schedule.scale) == (7, 0.5)
    assert model.optimizer.gradient_accumulation_steps == 2
    assert model.loss.label_smoothing == 0.2


class SavedModel:
    def save(self, path):
        with open(path, "w") as f:
            f.write("model")


def test_a_run_stopped_short_of_its_budget_saves_nothing(tmp_path):
    callbacks = make_callbacks(tmp_path, TrainSettings())
    budget = Budget(total_steps=5, steps_per_epoch=5)
    with pytest.raises(TrainingStopped,
                       match=r"training stopped early at step 3 of 5 \(NaN loss\?\)"):
        run_steps.finish(SavedModel(), RunDir(tmp_path), 3, budget, callbacks, TrainSettings(),
                         chief=False)
    assert not (tmp_path / "model.keras").exists()


def test_a_run_its_deadline_stopped_ends_normally(tmp_path, caplog):
    settings = TrainSettings(max_minutes=0.5)
    callbacks = make_callbacks(tmp_path, settings, deadline=1.0)
    callbacks.stop_at_time.stopped = True
    with caplog.at_level(logging.INFO, logger="tfformer.run"):
        run_steps.finish(SavedModel(), RunDir(tmp_path), 3, Budget(5, 5), callbacks, settings,
                         chief=False)
    assert "stopped at step 3 of 5: 0.5 minutes of wall time used" in caplog.text
    assert (tmp_path / "model.keras").read_text() == "model"


def test_packed_training_batches_are_asked_for_and_bounded_by_the_config(monkeypatch):
    asked = {}
    monkeypatch.setattr(inputs, "assemble", lambda *args, **kwargs: asked.update(kwargs))
    run_steps.assemble_batches(None, None, TrainSettings(pack_length=32), SMALL, placement(),
                               "tensorflow")
    assert asked["pack_length"] == 32 and asked["max_length"] == SMALL.max_length
    with pytest.raises(ValueError, match=r"pack_length \(300\) must be <= the config's "
                                         r"max_length \(256\)"):
        run_steps.assemble_batches(None, None, TrainSettings(pack_length=300), SMALL,
                                   placement(), "tensorflow")


def test_jit_over_several_tensorflow_replicas_is_refused_before_the_model_is_built():
    two = dataclasses.replace(placement(), replicas=2, description="2 replica(s)")
    with pytest.raises(ValueError, match=r"jit \(XLA\) does not work with 2 TensorFlow "
                                         r"replicas.*keras-team/keras#19005"):
        run_steps.build_model(SMALL, TrainSettings(jit=True), two, "tensorflow", warmup_steps=7)
    # One replica compiles as asked.
    assert run_steps.build_model(SMALL, TrainSettings(jit=True), placement(), "tensorflow",
                                 warmup_steps=7).jit_compile is True
