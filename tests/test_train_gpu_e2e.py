"""benchmarks/training/train_gpu_e2e.py end to end at tiny size on CPU: the real tfformer-train on
JAX from a prepared store, its per-epoch throughput and beam-search dev BLEU read back from the run,
and the synthetic benchmark of the same shape beside it (the GPU run, when there is one, is
benchmarks/results/train_gpu_e2e.json)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "training", "train_gpu_e2e.py")


@pytest.mark.slow
def test_the_gpu_run_script_trains_a_store_on_jax_and_reports_it(tmp_path):
    from tfformer.train.prepare import prepare_store

    store = prepare_store("builtin:600", tmp_path / "store", vocab_size=200).path
    out = tmp_path / "e2e.json"
    result = subprocess.run(
        [sys.executable, SCRIPT, "--store", store, "--preset", "tiny", "--minutes", "3",
         "--pack-length", "32", "--batch-tokens", "512", "--precision", "auto",
         "--steps-per-epoch", "4", "--dev-sentences", "3", "--beam-size", "2",
         "--synthetic-args", "--steps 2 --warmup 1 --pipelined-steps 3 --matmul-size 128",
         "--out", str(out),
         # Three epochs of 4 updates, however fast the machine (the minutes stay a bound).
         "--train-args", "--steps", "12"],
        capture_output=True, text=True, timeout=900,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 0, result.stderr[-5000:]
    report = json.loads(out.read_text())
    assert report == json.loads(result.stdout)
    run = report["run"]
    epochs = run["epochs"]
    assert [e["epoch"] for e in epochs] == [1, 2, 3]
    seconds = [e["seconds"] for e in epochs]
    assert seconds == sorted(seconds) and seconds[-1] <= run["wall_seconds"]
    for epoch in epochs:
        assert 0 <= epoch["dev_bleu"] <= 100 and epoch["steps"] >= 1
        assert epoch["step_seconds"] == pytest.approx(epoch["train_seconds"] / epoch["steps"],
                                                      rel=1e-3, abs=1e-4)
    assert run["batch_shape"] == [16, 32]
    assert run["compilations"]["train_step"] == 1  # packed rows: one shape, one program
    timed = epochs[1:]
    assert run["step_seconds"] == pytest.approx(
        sum(e["train_seconds"] for e in timed) / sum(e["steps"] for e in timed), rel=1e-3)
    assert report["fit_over_pipelined_step"] == pytest.approx(
        run["step_seconds"] / report["synthetic"]["pipelined_step_seconds"], rel=1e-2)
    assert report["real_over_synthetic_tokens"] == pytest.approx(
        run["target_tokens_per_second"] / report["synthetic"]["target_tokens_per_second"],
        rel=1e-2)
    assert run["best_dev_bleu"] == max(e["dev_bleu"] for e in epochs)
    assert set(report["targets"]) == {"real_tokens_at_least_80_percent_of_synthetic",
                                      "fit_step_within_3_percent_of_pipelined",
                                      "dev_bleu_40_within_7_minutes"}
