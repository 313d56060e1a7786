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
