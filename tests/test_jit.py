"""`--jit auto` (tfformer.train.jit): compiled steps on packed rows where they pay, plain steps
elsewhere, and a resumed run keeps its start's decision."""

import contextlib
import json

import pytest

from tfformer.train import jit
from tfformer.train import steps as run_steps
from tfformer.train.devices import Placement
from tfformer.train.settings import TrainSettings, load_config
from tfformer.utils.run_dir import RunDir

SMALL = load_config("tiny", vocab_size=40, d_model=16, num_heads=2, d_ff=16)
AVX2 = {"avx2", "fma"}
AVX512 = {"avx2", "avx512f", "avx512_bf16"}


@pytest.mark.parametrize("flags, accelerator, replicas, pays", [
    (AVX2, False, 1, True), (AVX512, True, 1, True), (AVX512, False, 1, False),
    (AVX2, False, 2, False), (AVX2, True, 2, True)])
def test_compiled_steps_pay_on_accelerators_and_cpus_without_avx512(flags, accelerator,
                                                                     replicas, pays):
    assert jit.compiled_steps_pay("tensorflow", replicas, flags=flags,
                                  accelerator=accelerator)[0] is pays


def test_auto_packs_where_compiled_steps_pay_and_keeps_a_given_row_length():
    auto = TrainSettings(jit="auto")
    on, why = jit.resolve(auto, "tensorflow", 256, flags=AVX2, accelerator=False)
    assert (on.jit, on.pack_length) == ("on", jit.AUTO_PACK_LENGTH)
    assert why == "compiled steps on packed rows of 128 tokens: a CPU without AVX-512"
    assert jit.resolve(auto, "jax", 64, flags=AVX2, accelerator=False)[0].pack_length == 64
    given = TrainSettings(jit="auto", pack_length=96)
    assert jit.resolve(given, "tensorflow", 256, flags=AVX2, accelerator=False)[0].pack_length \
        == 96
    off, why = jit.resolve(auto, "tensorflow", 256, flags=AVX512, accelerator=False)
    assert (off.jit, off.pack_length) == ("off", 0) and why.startswith("plain steps: a CPU with")
    # Only "auto" is decided here.
    for setting in ("on", "off"):
        assert jit.resolve(TrainSettings(jit=setting), "tensorflow", 256, flags=AVX2,
                           accelerator=False) == (TrainSettings(jit=setting), None)


def test_jit_settings_take_on_off_auto_and_the_old_switch():
    assert TrainSettings(jit=True).jit == "on" and TrainSettings(jit=False).jit == "off"
    with pytest.raises(ValueError, match=r"jit must be one of off, on, auto, got 'fast'"):
        TrainSettings(jit="fast")


def test_jit_flag_alone_means_on():
    from tfformer.cli.train import parse_args

    assert parse_args([]).settings.jit == "off"
    assert parse_args(["--jit"]).settings.jit == "on"
    assert parse_args(["--jit", "auto"]).settings.jit == "auto"


def placement():
    return Placement(scope=contextlib.nullcontext, replicas=1, chief=True, num_workers=1,
                     worker_index=0, description="one device", strategy=None)


def test_a_resumed_run_keeps_the_decision_its_start_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(jit, "cpu_flags", lambda: AVX2)
    monkeypatch.setattr(jit, "has_accelerator", lambda: False)
    run = RunDir(tmp_path)
    started = run_steps.choose_jit(run, TrainSettings(jit="auto"), SMALL, placement(),
                                   "tensorflow")
    assert (started.jit, started.pack_length) == ("on", 128)
    run_steps.check_or_record_config(run, SMALL, started, chief=True)
    assert json.loads(open(run.train_args).read())["jit"] == "on"
    # The same run on an AVX-512 machine: still compiled and packed, so its batches stay.
    monkeypatch.setattr(jit, "cpu_flags", lambda: AVX512)
    resumed = run_steps.choose_jit(run, TrainSettings(jit="auto"), SMALL, placement(),
                                   "tensorflow")
    assert (resumed.jit, resumed.pack_length) == ("on", 128)
    fresh = run_steps.choose_jit(RunDir(tmp_path / "new"), TrainSettings(jit="auto"), SMALL,
                                 placement(), "tensorflow")
    assert (fresh.jit, fresh.pack_length) == ("off", 0)
