"""Training in several JAX processes (`--coordinator`, `--num-processes`, `--process-id`): two
local processes on CPU (Gloo collectives) reach one process' weights on the same batches, train
a prepared store together, resume together after kill -9, and a process that cannot reach the
coordinator fails in time, naming it."""

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

from tests.test_store_training import backup_step, store  # noqa: F401 - store: a fixture

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# JAX-only: it runs in `make test`'s venv without TensorFlow (a second run here would repeat it).
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is not None and bool(os.environ.get("CI")),
    reason="runs in make test's JAX venv without TensorFlow (BACKEND_TESTS)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_env():
    env = {**os.environ, "PYTHONPATH": ROOT, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu",
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("XLA_FLAGS", None)
    return env


def start(command, log):
    with open(log, "w") as stderr:
        return subprocess.Popen(command, env=run_env(), stdout=subprocess.DEVNULL,
                                stderr=stderr)


def finish(processes, timeout=600):
    for process in processes:
        process.wait(timeout=timeout)
    return [process.returncode for process in processes]


def weights_of(path):
    with np.load(path) as saved:
        return [saved[f"arr_{i}"] for i in range(len(saved.files) - 3)], dict(saved)


@pytest.mark.slow
def test_two_processes_reach_one_process_weights_on_the_same_batches(tmp_path):
    script = os.path.join(HERE, "jax_processes_fit.py")
    address = f"127.0.0.1:{free_port()}"
    logs = [tmp_path / f"p{i}.txt" for i in range(2)]
    processes = [start([sys.executable, script, "process", address, str(i),
                        str(tmp_path / f"p{i}.npz")], logs[i]) for i in range(2)]
    assert finish(processes) == [0, 0], [log.read_text()[-2000:] for log in logs]
    single = subprocess.run([sys.executable, script, "single", str(tmp_path / "single.npz")],
                            env=run_env(), capture_output=True, text=True, timeout=600)
    assert single.returncode == 0, single.stderr[-2000:]
    reference, about = weights_of(tmp_path / "single.npz")
    assert int(about["replicas"]) == 2
    for i in range(2):
        trained, about = weights_of(tmp_path / f"p{i}.npz")
        assert int(about["replicas"]) == 1 and int(about["workers"]) == 2
        assert bool(about["chief"]) == (i == 0)
        for a, b in zip(trained, reference, strict=True):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    assert any(np.abs(a - b).max() > 1e-3 for a, b in zip(  # it trained
        reference, [np.random.default_rng(0).normal(0, 0.1, w.shape) for w in reference]))


def train_commands(store, out, address, total=8):  # noqa: F811 - the fixture's name
    return [[sys.executable, "-m", "tfformer.cli.train", "--backend", "jax", "--data",
             f"prepared:{store.path}", "--out", str(out), "--set", "d_model=32", "--set",
             "num_heads=2", "--set", "d_ff=64", "--set", "num_encoder_layers=1", "--set",
             "num_decoder_layers=1", "--set", "max_length=32", "--set", "dropout=0",
             "--pack-length", "32", "--batch-tokens", "256", "--steps", str(total),
             "--steps-per-epoch", "4", "--backup-every", "1", "--dev-sentences", "0",
             "--verbose", "0", "--coordinator", address, "--num-processes", "2",
             "--process-id", str(i)] for i in range(2)]


def models(out):
    return [keras.saving.load_model(path, compile=False).get_weights()
            for path in (out / "model.keras", out / "worker-1" / "model.keras")]


@pytest.mark.slow
def test_two_processes_train_a_store_and_resume_together_after_kill_9(store, tmp_path):  # noqa: F811
    whole = tmp_path / "whole"
    logs = [tmp_path / f"whole{i}.txt" for i in range(2)]
    processes = [start(c, log) for c, log in zip(
        train_commands(store, whole, f"127.0.0.1:{free_port()}"), logs)]
    assert finish(processes) == [0, 0], [log.read_text()[-3000:] for log in logs]
    assert "2 replica(s) in 2 processes" in logs[1].read_text()
    chief, other = models(whole)
    for a, b in zip(chief, other, strict=True):
        np.testing.assert_array_equal(a, b)  # one model, replicated
    assert not (whole / "worker-1" / "backup").exists()  # process 0 alone writes backups

    killed = tmp_path / "killed"
    logs = [tmp_path / f"killed{i}.txt" for i in range(2)]
    processes = [start(c, log) for c, log in zip(
        train_commands(store, killed, f"127.0.0.1:{free_port()}"), logs)]
    deadline = time.monotonic() + 300
    while backup_step(killed) < 3 and processes[1].poll() is None:
        assert time.monotonic() < deadline, logs[0].read_text()[-3000:]
        time.sleep(0.02)
    processes[1].send_signal(signal.SIGKILL)  # one process dies; the other cannot go on
    try:
        processes[0].wait(timeout=30)
    except subprocess.TimeoutExpired:
        processes[0].kill()
        processes[0].wait()
    killed_at = backup_step(killed)
    assert 3 <= killed_at < 8, killed_at
    logs = [tmp_path / f"resumed{i}.txt" for i in range(2)]
    processes = [start(c, log) for c, log in zip(
        train_commands(store, killed, f"127.0.0.1:{free_port()}"), logs)]
    assert finish(processes) == [0, 0], [log.read_text()[-3000:] for log in logs]
    for log in logs:  # both from process 0's backup
        assert f"starting at step {killed_at} of 8" in log.read_text()
    for resumed, uninterrupted in zip(models(killed), models(whole)):
        for a, b in zip(resumed, uninterrupted, strict=True):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


def test_a_process_that_cannot_reach_the_coordinator_fails_in_time_naming_it(
        store, tmp_path):  # noqa: F811
    address = f"127.0.0.1:{free_port()}"  # nobody listens there
    command = train_commands(store, tmp_path / "alone", address)[1]
    started = time.monotonic()
    result = subprocess.run([*command, "--coordinator-timeout", "3"], env=run_env(),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and time.monotonic() - started < 60
    assert f"the coordinator {address} (process 0) did not answer within 3 s" in result.stderr
