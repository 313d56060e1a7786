"""100 updates of tfformer-train in bf16 and fp16 reach the loss of float32 within the noise of
another seed, and a run reports its batch shapes."""

import csv
import os
import subprocess
import sys

import keras
import pytest

import tfformer.model.transformer  # noqa: F401  (registers the classes that model.keras names)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SMALL = ["--set", "d_model=32", "--set", "num_heads=2", "--set", "d_ff=64",
         "--set", "num_encoder_layers=1", "--set", "num_decoder_layers=1",
         "--set", "max_length=64", "--vocab-size", "300", "--batch-tokens", "512",
         "--dev-sentences", "0", "--verbose", "0", "--steps", "100", "--steps-per-epoch", "100",
         # A short warmup: the model learns within the 100 updates (fp16 steps are emulated on
         # CPUs, ~10x float32's time, so fewer steps keep this test short).
         "--warmup-steps", "30"]


def val_loss(out) -> float:
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert int(rows[-1]["step"]) == 100
    return float(rows[-1]["val_loss"])


@pytest.mark.slow
def test_100_steps_in_half_precision_reach_the_fp32_loss(tmp_path):
    runs = {"fp32": [], "fp32-seed1": ["--seed", "1"], "bf16": ["--mixed-precision", "bf16"],
            "fp16": ["--mixed-precision", "fp16"]}
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"}
    processes = {
        name: subprocess.Popen(
            [sys.executable, "-m", "tfformer.cli.train", "--data", "builtin:2000",
             "--out", str(tmp_path / name), *SMALL, *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for name, extra in runs.items()}
    logs = {}
    for name, process in processes.items():
        _, logs[name] = process.communicate(timeout=900)
        assert process.returncode == 0, logs[name][-3000:]
    losses = {name: val_loss(tmp_path / name) for name in runs}
    print("validation loss after 100 updates:", losses)
    noise = abs(losses["fp32-seed1"] - losses["fp32"])
    for precision in ("bf16", "fp16"):
        assert abs(losses[precision] - losses["fp32"]) <= max(2 * noise, 0.05), losses
    assert losses["fp32"] < 4.0  # it learned: the uniform loss is ln(300) = 5.7

    bf16 = keras.models.load_model(tmp_path / "bf16" / "model.keras")
    assert bf16.dtype_policy.name == "mixed_bfloat16"
    assert "mixed_float16" in logs["fp16"] and "mixed_bfloat16" in logs["bf16"]
    # The run reports its batch shapes and padding after each epoch.
    assert "batch shape(s) so far" in logs["fp32"] and "padding" in logs["fp32"]
