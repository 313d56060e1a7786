"""The README's path through the installed console scripts, from outside the checkout:
train (bf16, gradient accumulation, dev BLEU) -> run dir -> export -> tfformer-serve ->
tfformer-translate over gRPC."""

import csv
import json
import os
import re
import signal
import subprocess
import sys

import keras
import pytest

from tests.test_training import SMALL

BIN = os.path.dirname(sys.executable)


def env():
    """The installed package only: no PYTHONPATH, and run from a directory outside the checkout."""
    return {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
            "TF_CPP_MIN_LOG_LEVEL": "2"}


def script(name):
    path = os.path.join(BIN, name)
    if not os.path.exists(path):
        pytest.fail(f"{path} missing: `make test` installs the console scripts (pip install -e .)")
    return path


@pytest.mark.slow
def test_readme_path_train_export_serve_translate(tmp_path):
    run, models = tmp_path / "run", tmp_path / "models"
    small = [a for a in SMALL]
    small[small.index("--dev-sentences") + 1] = "3"
    trained = subprocess.run(
        [script("tfformer-train"), "--data", "builtin:2000", "--out", str(run), *small,
         "--steps", "4", "--steps-per-epoch", "4", "--grad-accum", "2",
         "--mixed-precision", "bf16"],
        capture_output=True, text=True, timeout=600, env=env(), cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    summary = json.loads(trained.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 4 and summary["epoch"] == 2

    with open(run / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert "dev_bleu" in rows[0] and "val_loss" in rows[0]
    assert [(int(r["epoch"]), int(r["step"])) for r in rows] == [(1, 2), (2, 4)]
    assert sorted(os.listdir(run / "checkpoints")) == ["ckpt-00001.weights.h5",
                                                       "ckpt-00002.weights.h5"]
    assert os.listdir(run / "logs" / "train") and os.listdir(run / "logs" / "validation")
    model = keras.models.load_model(run / "model.keras")
    assert model.dtype_policy.name == "mixed_bfloat16"
    assert model.optimizer.gradient_accumulation_steps == 2
    assert int(model.optimizer.iterations) == 4
    dev_sources = (run / "dev_sources.txt").read_text().splitlines()
    assert len(dev_sources) == 16 and all(dev_sources)

    exported = subprocess.run(
        [script("tfformer-export"), str(run), "--model-base-path", str(models), "--beam-size",
         "1"], capture_output=True, text=True, timeout=600, env=env(), cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr[-3000:]
    report = json.loads(exported.stdout.strip().splitlines()[-1])
    assert report["version"] == 1
    assert report["check_sentences"] == str(run / "dev_sources.txt")  # the run's dev sources

    sentences = dev_sources[:2]
    in_process = subprocess.run(
        [script("tfformer-translate"), "--saved-model", str(models / "tfformer"), *sentences],
        capture_output=True, text=True, timeout=300, env=env(), cwd=tmp_path)
    assert in_process.returncode == 0, in_process.stderr[-3000:]
    server = subprocess.Popen(
        [script("tfformer-serve"), "--model-base-path", str(models / "tfformer"), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env(), cwd=tmp_path)
    try:
        address = re.search(r"listening on (\S+)", server.stdout.readline()).group(1)
        over_grpc = subprocess.run(
            [script("tfformer-translate"), "--server", address, *sentences],
            capture_output=True, text=True, timeout=300, env=env(), cwd=tmp_path)
        assert over_grpc.returncode == 0, over_grpc.stderr[-3000:]
        assert over_grpc.stdout == in_process.stdout
        assert len(over_grpc.stdout.splitlines()) == len(sentences)
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
