"""Training under the JAX backend: tfformer-train --backend jax writes the same run directory as
on TensorFlow (resumable after kill -9), its model exports with the TensorFlow path, several
host devices train data-parallel, and a backend that is missing is named with its extra."""

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

from tests.test_training import HERE, env, train_command
from tfformer.data.buckets import bucket_lengths, default_growth
from tfformer.utils import backends


def jax_env(**extra):
    return env(KERAS_BACKEND="jax", **extra)


def write_corpus(directory, train=600, dev=6):
    """Pairs of six-word sources: few distinct lengths, so few shapes for JAX to compile."""
    from tfformer.data.builtin import builtin_pairs

    for name, count in (("train", train), ("dev", dev)):
        pairs = [p for p in builtin_pairs(name, 20 * count) if len(p[0].split()) == 6][:count]
        (directory / f"{name}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs))
    return f"tsv:{directory / 'train.tsv'},{directory / 'dev.tsv'}"


def backup_step(out) -> int:
    try:
        with open(out / "backup" / "state.json") as f:
            return json.load(f)["step"]
    except (OSError, ValueError):
        return 0


@pytest.mark.slow
def test_jax_run_resumes_after_kill_9_and_exports_with_tensorflow(tmp_path):
    out = tmp_path / "run"
    total, per_epoch = 6, 3
    # Two host devices: the run trains data-parallel (keras.distribution.DataParallel).
    command = train_command(out, "--backend", "jax", "--devices", "2", "--steps", str(total),
                            "--steps-per-epoch", str(per_epoch), "--backup-every", "1",
                            "--dev-sentences", "4")
    command[command.index("--data") + 1] = write_corpus(tmp_path)
    log = tmp_path / "killed.txt"
    with open(log, "w") as stderr:
        process = subprocess.Popen(command, env=jax_env(), stdout=subprocess.DEVNULL,
                                   stderr=stderr)
    try:  # kill -9 once the first epoch and a step of the second are backed up
        deadline = time.monotonic() + 400
        while backup_step(out) < per_epoch + 1 and process.poll() is None:
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    killed_at = backup_step(out)
    assert per_epoch < killed_at < total, killed_at
    assert "Keras on jax, 2 replica(s) under keras.distribution.DataParallel" in log.read_text()

    result = subprocess.run(command, env=jax_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"starting at step {killed_at} of {total}" in result.stderr
    # Bounded shapes: each replica's rows from the compiled grid, one program per shape at most.
    report = re.findall(r"(\d+) batch shape\(s\) so far, rows x length \(batches\): (.*?); "
                        r".*compiled: train_step (\d+), test_step (\d+)", result.stderr)[-1]
    shapes = [tuple(map(int, s.split(" ")[0].split("x"))) for s in report[1].split(", ")]
    grid = bucket_lengths(64, growth=default_growth(compiled=True))
    assert len(shapes) == int(report[0]) and 1 <= int(report[2]) <= len(shapes) <= len(grid)
    assert all(rows % 2 == 0 and length in grid for rows, length in shapes)
    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == [1, 2]
    assert [int(r["step"]) for r in rows] == [3, 6]
    for row in rows:  # dev BLEU too: the step-by-step search of tfformer.decode.keras_search
        assert all(value != "" for value in row.values()), row
    model = keras.models.load_model(out / "model.keras")  # on this process' TensorFlow
    assert int(model.optimizer.iterations) == total

    # The weights are backend-neutral: the TensorFlow export (op-set and fresh-process checks
    # included) translates as the JAX model does, token for token (greedy on both sides). The
    # JAX side: the resumed run's dev BLEU (one evaluation, on the final weights) logs its
    # greedy translations of the first dev sentences (tfformer.decode.keras_search).
    samples = re.findall(r"  src: (.*)\n  hyp: (.*)\n  ref: ", result.stderr)
    assert len(samples) >= 2, result.stderr[-3000:]
    from tfformer import run

    exported = run.export(out, model_base_path=str(tmp_path / "models"), beam_size=1)
    import tensorflow as tf

    serving = tf.saved_model.load(exported.export_dir).signatures["serving_default"]
    sources = tf.constant([source for source, _ in samples])
    exported_texts = [t.decode() for t in serving(sources)["translations"].numpy()]
    assert exported_texts == [hypothesis for _, hypothesis in samples]


@pytest.mark.slow
def test_two_host_devices_match_one_device_on_the_same_batches():
    result = subprocess.run([sys.executable, os.path.join(HERE, "jax_data_parallel_fit.py")],
                            capture_output=True, text=True, timeout=600, env=jax_env())
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["distribution"] == "DataParallel" and report["replicas"] == 2
    assert report["devices"] == ["cpu:0", "cpu:1"] and report["weights_on_devices"] == 2
    assert all(size % 2 == 0 for size in report["batch_sizes"])
    assert report["steps"] == [4, 4] and len(report["parallel_losses"]) == 4
    np.testing.assert_allclose(report["parallel_losses"], report["single_losses"], rtol=1e-5)
    assert report["max_weight_diff"] < 1e-5


def test_a_missing_backend_is_named_with_its_extra(monkeypatch, tmp_path, caplog):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "jax" else real(name, *a))
    with pytest.raises(ImportError, match=r"pip install 'tfformer\[jax\]'"):
        backends.select_backend("jax")
    from tfformer.cli import train

    assert train.main(["--backend", "jax", "--out", str(tmp_path / "run")]) == 2
    assert "the jax backend needs the jax package" in caplog.text
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_another_backend_than_the_running_one_is_refused():
    assert backends.select_backend(None) == keras.backend.backend() == "tensorflow"
    with pytest.raises(ValueError, match="KERAS_BACKEND=jax before anything imports Keras"):
        backends.select_backend("jax")
    with pytest.raises(ValueError, match="backend must be one of"):
        backends.select_backend("theano")
