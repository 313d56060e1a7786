"""Fine-tuning (`TrainSettings.init_from`): a new run from another run's weights, vocabulary and
architecture, with the continued-training schedule and frozen parts."""

from __future__ import annotations

import filecmp
import hashlib
import json
import os

import keras
import numpy as np
import pytest

from tests.test_run_state import SMALL_ARCHITECTURE, small_settings


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    from tfformer import run

    out = tmp_path_factory.mktemp("finetune") / "base"
    run.train(out, "tiny", small_settings(steps=4), SMALL_ARCHITECTURE)
    return out


def weights_of(path):
    return [w.numpy() for w in keras.models.load_model(path, compile=False).weights]


def test_a_fine_tuned_run_starts_from_the_runs_weights_and_records_it(base, tmp_path):
    """init_from gives the new run the base run's vocabulary and architecture (dropout may
    change), records the base model's path and hash, trains with inverse_sqrt at 3e-4, and
    leaves the frozen embeddings exactly as they were while the rest moves."""
    from tfformer import run

    out = tmp_path / "tuned"
    result = run.train(out, settings=small_settings(init_from=str(base), steps=2,
                                                    data="builtin:200", freeze="embeddings"),
                       overrides={"dropout": 0.0})
    assert result.step == 2
    assert filecmp.cmp(out / "tokenizer.model", base / "tokenizer.model", shallow=False)
    recorded = json.loads((out / "init_from.json").read_text())
    digest = hashlib.sha256((base / "model.keras").read_bytes()).hexdigest()
    assert recorded["sha256"] == digest and recorded["path"] == os.path.abspath(base)
    base_config = json.loads((base / "config.json").read_text())
    tuned_config = json.loads((out / "config.json").read_text())
    assert tuned_config == {**base_config, "dropout": 0.0}
    args = json.loads((out / "train_args.json").read_text())
    assert (args["lr_schedule"], args["learning_rate"]) == ("inverse_sqrt", 3e-4)
    model = keras.models.load_model(out / "model.keras", compile=False)
    before = keras.models.load_model(base / "model.keras", compile=False)
    np.testing.assert_array_equal(model.embedding.embeddings.numpy(),
                                  before.embedding.embeddings.numpy())
    moved = [not np.array_equal(a.numpy(), b.numpy())
             for a, b in zip(model.encoder.weights, before.encoder.weights)]
    assert all(moved), moved
    # The same command resumes the finished run instead of starting again.
    again = run.train(out, settings=small_settings(init_from=str(base), steps=2,
                                                   data="builtin:200", freeze="embeddings"),
                      overrides={"dropout": 0.0})
    assert again.step == 2 and len(again.history) == 1


def test_fine_tuning_refuses_another_architecture_naming_the_field(base, tmp_path):
    from tfformer import run

    settings = small_settings(init_from=str(base), steps=1)
    with pytest.raises(ValueError, match="d_ff: 32 -> 64"):
        run.train(tmp_path / "a", settings=settings, overrides={"d_ff": 64})
    with pytest.raises(ValueError, match="d_model: 16 -> 128"):
        run.train(tmp_path / "b", "tiny", settings)
    with pytest.raises(FileNotFoundError, match="neither a run directory nor a .keras"):
        run.train(tmp_path / "c", settings=small_settings(init_from=str(tmp_path / "none")))
    assert not os.path.exists(tmp_path / "a" / "config.json")


def test_a_fine_tuned_run_resumes_only_from_the_weights_it_started_from(base, tmp_path):
    """A resume must name init_from again, with the same weights (by hash); a run started
    without it cannot become a fine-tuned one."""
    import shutil

    from tfformer import run

    out = tmp_path / "tuned"
    run.train(out, settings=small_settings(init_from=str(base), steps=2))
    with pytest.raises(ValueError, match="give init_from .* again"):
        run.train(out, settings=small_settings(steps=4))
    other = tmp_path / "other"
    shutil.copytree(base, other)
    model = keras.models.load_model(other / "model.keras", compile=False)
    model.embedding.embeddings.assign(model.embedding.embeddings.numpy() + 1.0)
    model.save(other / "model.keras")
    with pytest.raises(ValueError, match="weights changed since"):
        run.train(out, settings=small_settings(init_from=str(other), steps=4))
    with pytest.raises(ValueError, match="did not start with init_from"):
        run.train(base, settings=small_settings(init_from=str(other), steps=6))


def test_the_settings_resolve_the_continued_training_schedule():
    from tfformer.train.settings import TrainSettings, warmup_steps

    tuned = TrainSettings(init_from="runs/x")
    assert (tuned.lr_schedule, tuned.learning_rate) == ("inverse_sqrt", 3e-4)
    assert warmup_steps(tuned, "base") == 400 and warmup_steps(TrainSettings(), "base") == 4000
    assert TrainSettings().lr_schedule == "noam"
    assert TrainSettings(lr_schedule="constant", learning_rate=1e-5).learning_rate == 1e-5
    with pytest.raises(ValueError, match="freeze takes embeddings, encoder, decoder"):
        TrainSettings(freeze="embeddings,attention")
    with pytest.raises(ValueError, match="noam's follows from d_model"):
        TrainSettings(learning_rate=1e-4)
    assert TrainSettings(freeze="encoder, embeddings").freeze_parts == ["encoder", "embeddings"]


def test_k_fine_tuning_updates_equal_the_base_model_loaded_and_trained_by_hand(base, tmp_path):
    """init_from with dropout 0 ends K updates with the weights of the base run's model.keras
    loaded by hand into a dropout-0 model, compiled with inverse_sqrt to 3e-4 after 400 updates
    (the fine-tuning defaults, spelled out) and trained with `train_on_batch` on the first K
    batches of the same prepared store."""
    import itertools

    from tfformer import run
    from tfformer.config import TransformerConfig
    from tfformer.data.buckets import default_growth
    from tfformer.data.loader import Loader
    from tfformer.data.store import Store
    from tfformer.model.compile_transformer import compile_transformer
    from tfformer.model.schedule import paper_optimizer
    from tfformer.model.transformer import Transformer
    from tfformer.train.prepare import prepare_store

    steps = 3
    store = prepare_store("builtin:200", tmp_path / "store",
                          tokenizer=str(base / "tokenizer.model")).path
    settings = small_settings(init_from=str(base), steps=steps, steps_per_epoch=steps,
                              data=f"prepared:{store}", warmup_steps=None)
    tuned = run.train(tmp_path / "tuned", settings=settings, overrides={"dropout": 0.0})
    assert tuned.step == steps

    loaded = keras.saving.load_model(base / "model.keras", compile=False)
    config = json.loads((base / "config.json").read_text())
    hand = Transformer(TransformerConfig.from_dict({**config, "dropout": 0.0}))
    hand.build()
    hand.set_weights(loaded.get_weights())
    compile_transformer(hand, paper_optimizer(config["d_model"], 400, schedule="inverse_sqrt",
                                              learning_rate=3e-4),
                        label_smoothing=settings.label_smoothing)
    loader = Loader(Store.open(store).train, batch_tokens=settings.batch_tokens,
                    max_length=config["max_length"], seed=settings.seed,
                    bucket_growth=default_growth(False))
    for inputs, targets in itertools.islice(loader.batches(prefetch=0), steps):
        hand.train_on_batch(inputs, targets)
    assert int(hand.optimizer.iterations) == steps
    after = keras.saving.load_model(tmp_path / "tuned" / "model.keras", compile=False)
    moved = 0
    for variable, expected, started in zip(after.weights, hand.weights, loaded.weights):
        if variable.path.endswith("key_bias"):
            # Its gradient is 0 in exact arithmetic (a softmax is shift-invariant): Adam turns
            # the float noise left in its place into steps of +-lr, in whichever direction.
            continue
        np.testing.assert_allclose(variable.numpy(), expected.numpy(), rtol=0, atol=1e-7,
                                   err_msg=variable.path)
        moved += not np.array_equal(variable.numpy(), started.numpy())
    assert moved == len([w for w in after.weights if not w.path.endswith("key_bias")])


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_fine_tuning_on_two_devices_starts_from_the_runs_weights(base, tmp_path, backend):
    """tfformer-train --init-from on two logical CPUs (MirroredStrategy; JAX's DataParallel on
    two host devices): two updates of the warmup (3e-4 * u / 400 at update u) move each weight
    by about those rates from the base run's, not from a fresh initialization."""
    import subprocess
    import sys

    from tests.test_training import env

    out = tmp_path / "tuned"
    result = subprocess.run(
        [sys.executable, "-m", "tfformer.cli.train", "--init-from", str(base), "--out", str(out),
         "--data", "builtin:300", "--steps", "2", "--steps-per-epoch", "2", "--devices", "2",
         "--set", "dropout=0", "--batch-tokens", "512", "--dev-sentences", "0",
         "--verbose", "0", "--backend", backend],
        capture_output=True, text=True, timeout=600, env=env())
    assert result.returncode == 0, result.stderr[-3000:]
    strategy = "MirroredStrategy" if backend == "tensorflow" else "keras.distribution.DataParallel"
    assert f"2 replica(s) under {strategy}" in result.stderr, result.stderr[-2000:]
    assert json.loads((out / "init_from.json").read_text())["path"] == os.path.abspath(base)
    rates = [3e-4 * update / 400 for update in (1, 2)]
    changes = [np.max(np.abs(after - before)) for after, before in
               zip(weights_of(out / "model.keras"), weights_of(base / "model.keras"))]
    assert max(changes) <= 2 * sum(rates), max(changes)
    # Every weight but the attention's key biases (no gradient: a softmax is shift-invariant).
    assert sum(change > 0 for change in changes) >= len(changes) - 2, changes


def test_a_fine_tuned_run_resumed_ends_with_the_weights_of_one_never_stopped(base, tmp_path):
    """A resume restores the fine-tuned run's backup over the starting point's weights (not the
    reverse): without dropout, 2 + 2 updates end where 4 uninterrupted ones do."""
    from tfformer import run

    def tuned(out, steps):
        return run.train(out, settings=small_settings(init_from=str(base), steps=steps,
                                                      data="builtin:200"),
                         overrides={"dropout": 0.0})

    tuned(tmp_path / "stopped", 2)
    resumed = tuned(tmp_path / "stopped", 4)
    whole = tuned(tmp_path / "whole", 4)
    assert resumed.step == whole.step == 4
    for a, b in zip(weights_of(tmp_path / "stopped" / "model.keras"),
                    weights_of(tmp_path / "whole" / "model.keras")):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    assert not all(np.array_equal(a, b) for a, b in zip(
        weights_of(tmp_path / "whole" / "model.keras"), weights_of(base / "model.keras")))
