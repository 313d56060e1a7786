"""Run settings without training: the warmup a config gets, the budget, the shared checks."""

import dataclasses
import re
import subprocess
import sys

import pytest

from tfformer.config import TransformerConfig
from tfformer.train.settings import (
    PAPER_WARMUP_STEPS,
    Budget,
    TrainSettings,
    load_config,
    warmup_steps,
)
from tfformer.utils.checks import check_at_least


@pytest.mark.parametrize("config", [
    "tiny",
    load_config("tiny"),
    load_config("tiny", vocab_size=2000, dropout=0.3),  # the run's vocabulary; dropout aside
], ids=["name", "object", "object-with-vocab-and-dropout"])
def test_the_tiny_preset_warms_up_400_however_it_is_given(config):
    assert warmup_steps(TrainSettings(), config) == 400


def test_a_preset_in_a_json_file_warms_up_as_the_preset(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(load_config("tiny").to_json())
    assert warmup_steps(TrainSettings(), str(path)) == 400


@pytest.mark.parametrize("config", ["base", "big", load_config("tiny", d_ff=64),
                                    TransformerConfig()])
def test_other_architectures_warm_up_as_the_paper(config):
    assert warmup_steps(TrainSettings(), config) == PAPER_WARMUP_STEPS == 4000


def test_a_given_warmup_wins():
    assert warmup_steps(TrainSettings(warmup_steps=7), "tiny") == 7


def never_called():
    raise AssertionError("the data is counted only when epochs set the budget")


def test_budget_of_steps_has_epochs_of_100_updates_and_no_deadline():
    budget = Budget.from_settings(TrainSettings(), never_called, started=0.0)
    assert budget == Budget(total_steps=400, steps_per_epoch=100, accumulation=1, deadline=None)
    assert budget.epochs == 4
    assert budget.describe() == "400 updates of 1 batch(es), 100 per epoch (4 epochs)"


def test_budget_of_few_steps_is_one_epoch_of_accumulated_batches():
    budget = Budget.from_settings(TrainSettings(steps=10, grad_accum=4), never_called, 0.0)
    assert (budget.total_steps, budget.steps_per_epoch, budget.epochs) == (10, 40, 1)


def test_budget_of_epochs_counts_passes_over_the_data():
    settings = TrainSettings(epochs=2, grad_accum=2)
    budget = Budget.from_settings(settings, lambda: 25, started=0.0)
    # 2 passes of 25 batches are 25 updates; an epoch is the pass, cut to whole updates.
    assert (budget.total_steps, budget.steps_per_epoch, budget.epochs) == (25, 24, 3)
    tiny_data = Budget.from_settings(TrainSettings(epochs=1, grad_accum=4), lambda: 3, 0.0)
    assert (tiny_data.total_steps, tiny_data.steps_per_epoch) == (1, 4)


def test_budget_deadline_counts_from_the_start():
    budget = Budget.from_settings(TrainSettings(max_minutes=1.5), never_called, started=100.0)
    assert budget.deadline == 190.0


def test_budget_refuses_epochs_that_end_between_updates():
    settings = TrainSettings(steps=10, steps_per_epoch=6, grad_accum=4)
    with pytest.raises(ValueError, match=r"steps_per_epoch \(6\) must be a multiple of "
                                         r"grad_accum \(4\): epochs end on an update"):
        Budget.from_settings(settings, never_called, 0.0)


@pytest.mark.parametrize("call, message", [
    (lambda: check_at_least("steps", 0), "steps must be >= 1, got 0"),
    (lambda: check_at_least("max_length", 1, 2, "BOS and EOS"),
     "max_length must be >= 2 (BOS and EOS), got 1"),
    (lambda: TrainSettings(backup_every=0), "backup_every must be >= 1, got 0"),
    (lambda: TrainSettings(vocab_sample=1), "vocab_sample must be >= 2, got 1"),
    (lambda: TrainSettings(dev_sentences=-1), "dev_sentences must be >= 0, got -1"),
    (lambda: TransformerConfig(vocab_size=4),
     "vocab_size must be >= 5 (4 reserved ids plus one piece), got 4"),
    (lambda: TrainSettings(pack_length=-1),
     "pack_length must be >= 2 (a token plus BOS/EOS), got -1"),
], ids=["default", "with-reason", "backup_every", "vocab_sample", "dev_sentences", "vocab_size",
        "pack_length"])
def test_checks_name_the_setting_and_the_bound(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


def test_none_passes_the_check():
    check_at_least("steps", None)


def test_settings_import_no_tensorflow():
    code = ("import sys, tfformer.run, tfformer.train.settings\n"
            "print(sorted(m for m in ('tensorflow', 'keras', 'jax') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=True)
    assert result.stdout.strip() == "[]"


def test_each_settings_help_is_on_its_field_not_in_the_docstring():
    doc = TrainSettings.__doc__
    assert "Args:" not in doc
    for field in dataclasses.fields(TrainSettings):
        assert field.metadata.get("help", "").strip(), f"{field.name}: no help on the field"
        assert f"{field.name}:" not in doc, f"{field.name} is described in the docstring too"
