"""Training on many devices and workers, resuming after a kill, checkpoint averaging, and the
tfformer-train program's handling of bad input."""

import csv
import gzip
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
import types

import keras
import numpy as np
import pytest

from tfformer import Transformer, TransformerConfig
from tfformer.cli.train import main as train_main

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# A model small enough for subprocess runs of a few seconds.
SMALL = ["--set", "d_model=32", "--set", "num_heads=2", "--set", "d_ff=64",
         "--set", "num_encoder_layers=1", "--set", "num_decoder_layers=1",
         "--set", "max_length=64", "--vocab-size", "300", "--batch-tokens", "512",
         "--dev-sentences", "0", "--verbose", "0"]


def env(**extra):
    return {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2", **extra}


def run_script(path, timeout=600):
    result = subprocess.run([sys.executable, path], capture_output=True, text=True,
                            timeout=timeout, env=env())
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def train_command(out, *extra):
    return [sys.executable, "-m", "tfformer.cli.train", *train_args(out, *extra)]


def train_args(out, *extra):
    """tfformer-train's arguments for a small run on the built-in corpus."""
    return ["--data", "builtin:2000", "--out", str(out), *SMALL, *extra]


@pytest.mark.slow
def test_two_logical_devices_match_one_device_on_the_same_batches():
    report = run_script(os.path.join(HERE, "mirrored_fit.py"))
    assert report["strategy"] == "MirroredStrategy" and report["replicas"] == 2
    assert all(size % 2 == 0 for size in report["batch_sizes"])
    assert report["steps"] == [4, 4]
    np.testing.assert_allclose(report["mirrored_losses"], report["single_losses"], rtol=1e-5)
    assert report["max_weight_diff"] < 1e-5


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_workers_on_localhost_train_and_agree_on_weights(tmp_path):
    workers = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    out = tmp_path / "run"
    # Two training files: each worker streams its own (sharding by file).
    from tfformer.data.builtin import builtin_pairs

    pairs = builtin_pairs("train", 2000)
    for name, part in (("a.tsv", pairs[:1000]), ("b.tsv", pairs[1000:])):
        (tmp_path / name).write_text("".join(f"{s}\t{t}\n" for s, t in part))
    (tmp_path / "dev.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in builtin_pairs("dev", 20)))
    data = f"tsv:{tmp_path}/a.tsv+{tmp_path}/b.tsv,{tmp_path}/dev.tsv"
    processes = []
    for index in range(2):
        tf_config = json.dumps({"cluster": {"worker": workers},
                                "task": {"type": "worker", "index": index}})
        processes.append(subprocess.Popen(
            train_command(out, "--steps", "4", "--steps-per-epoch", "2", "--warmup-steps",
                          "4", "--keep-initial-weights", "--data", data),
            env=env(TF_CONFIG=tf_config), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True))
    try:
        outputs = [p.communicate(timeout=600) for p in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    for index, (process, (_, stderr)) in enumerate(zip(processes, outputs)):
        assert process.returncode == 0, f"worker {index}:\n{stderr[-3000:]}"
    assert "MultiWorkerMirroredStrategy" in outputs[0][1]
    for index, (_, stderr) in enumerate(outputs):
        assert f"worker {index} reads shard {index} of 2 (by file)" in stderr
    chief = keras.models.load_model(out / "model.keras")
    other = keras.models.load_model(out / "worker-1" / "model.keras")
    assert int(chief.optimizer.iterations) == int(other.optimizer.iterations) == 4
    for a, b in zip(chief.get_weights(), other.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-6)
    # Both trained: the weights moved from the run's own initial weights.
    for run in (out, out / "worker-1"):
        initial = Transformer(chief.transformer_config)
        initial.build()
        initial.load_weights(run / "initial.weights.h5")
        trained = keras.models.load_model(run / "model.keras")
        assert max(np.abs(a - b).max() for a, b in zip(trained.get_weights(),
                                                        initial.get_weights())) > 1e-3


def wait_for_line(path, text, process, timeout=300):
    """Waits until the file `path` (a process's stderr) contains `text`; False if it exited."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if text in path.read_text(errors="replace"):
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.02)
    raise TimeoutError(f"{text!r} did not appear in {path}")


def wait_for_temporary_file(directory, process, timeout=120):
    """Waits until a write-aside file (.tmp-*) exists under `directory`: a save in progress."""
    deadline = time.time() + timeout
    while time.time() < deadline and process.poll() is None:
        if any(name.startswith(".tmp-") for _, _, names in os.walk(directory) for name in names):
            return True
        time.sleep(0.001)
    return False


def tensorboard_steps(log_dir):
    import tensorflow as tf

    steps = {}
    for root, _, names in os.walk(log_dir):
        for name in names:
            if name.startswith("events.out.tfevents"):
                for event in tf.compat.v1.train.summary_iterator(os.path.join(root, name)):
                    for value in event.summary.value:
                        key = (os.path.basename(root), value.tag)
                        steps.setdefault(key, []).append(event.step)
    return steps


@pytest.mark.slow
def test_ten_kill_nines_lose_nothing_and_tear_nothing(tmp_path):
    """kill -9 at 10 moments (in start-up, in training, and while a backup, checkpoint or CSV is
    being written), the same command rerun after each: the run ends at exactly the requested
    step with a loadable model, one CSV row per epoch and no duplicate TensorBoard step."""
    out = tmp_path / "run"
    total, per_epoch = 40, 8
    # A small dev file keeps each of the 11 start-ups and the per-epoch validation short.
    from tfformer.data.builtin import builtin_pairs

    for name, pairs in (("train", builtin_pairs("train", 2000)), ("dev", builtin_pairs("dev", 40))):
        (tmp_path / f"{name}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs))
    command = train_command(out, "--steps", str(total), "--steps-per-epoch", str(per_epoch),
                            "--backup-every", "1")
    command[command.index("--data") + 1] = f"tsv:{tmp_path / 'train.tsv'},{tmp_path / 'dev.tsv'}"
    rng = np.random.default_rng(1234)
    start_steps, torn_writes_survived = [], 0
    for attempt in range(10):
        log = tmp_path / f"stderr-{attempt}.txt"
        with open(log, "w") as stderr:
            process = subprocess.Popen(command, env=env(), stdout=subprocess.DEVNULL,
                                       stderr=stderr)
        try:
            if attempt == 0:
                time.sleep(rng.uniform(1.0, 6.0))  # somewhere in start-up
            elif not wait_for_line(log, "starting at step", process):
                break  # finished before it could be killed
            elif attempt % 2:
                time.sleep(rng.uniform(0.0, 1.5))  # somewhere in training
            elif wait_for_temporary_file(out, process):
                time.sleep(rng.uniform(0.0, 0.003))  # in the middle of a save
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        text = log.read_text(errors="replace")
        assert "Traceback" not in text, text[-3000:]
        if "starting at step" in text:
            start_steps.append(int(text.split("starting at step")[1].split()[0]))
        torn_writes_survived += any(
            name.startswith(".tmp-") for _, _, names in os.walk(out) for name in names)

    result = subprocess.run(command, env=env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert start_steps == sorted(start_steps) and len(start_steps) >= 5, start_steps
    model = keras.models.load_model(out / "model.keras")
    assert int(model.optimizer.iterations) == total

    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == list(range(1, total // per_epoch + 1))
    assert [int(r["step"]) for r in rows] == list(range(per_epoch, total + 1, per_epoch))
    for row in rows:
        assert all(value != "" for value in row.values()), row
        assert np.isfinite(float(row["loss"])) and np.isfinite(float(row["val_loss"]))
    logged = tensorboard_steps(out / "logs")
    assert ("train", "epoch_loss") in logged and ("validation", "epoch_loss") in logged
    # The test extra has matplotlib: the run ends with its history drawn (tests/test_plots.py
    # checks what is drawn); a PNG of three panels, wider than tall.
    from matplotlib.image import imread

    height, width = imread(out / "history.png").shape[:2]
    assert width > 2 * height > 200
    for key, steps in logged.items():
        assert sorted(steps) == [int(r["step"]) for r in rows], key

    # Running the finished command again takes no further step and keeps the history.
    again = subprocess.run(command, env=env(), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert int(keras.models.load_model(out / "model.keras").optimizer.iterations) == total
    with open(out / "metrics.csv", newline="") as f:
        assert list(csv.DictReader(f)) == rows
    # Some kill landed in the middle of a write (it left its .tmp- file), and nothing tore.
    assert torn_writes_survived >= 1


def test_resume_with_another_architecture_exits_2_naming_the_field(tmp_path, caplog):
    out = tmp_path / "run"
    out.mkdir()
    # A run dir whose saved config has d_ff=128 where this command asks for 64.
    saved = TransformerConfig(vocab_size=300, d_model=32, num_heads=2, d_ff=128,
                              num_encoder_layers=1, num_decoder_layers=1, max_length=64)
    (out / "config.json").write_text(saved.to_json())
    assert train_main(train_args(out, "--steps", "1")) == 2, caplog.text[-3000:]
    assert "d_ff: 128 -> 64" in caplog.text
    assert not (out / "backup").exists()


@pytest.mark.parametrize("content, message", [
    ("hola\tmundo\nsin tabulador\n", "bad.tsv:2: "),
    ("", "bad.tsv"),
])
def test_train_program_reports_bad_data_with_file_and_line(tmp_path, content, message, caplog):
    bad = tmp_path / "bad.tsv"
    bad.write_text(content)
    assert train_main(["--data", f"tsv:{bad}", "--out", str(tmp_path / "run")]) == 2
    assert message in caplog.text


def test_skip_bad_lines_counts_what_it_skipped(tmp_path, caplog):
    bad = tmp_path / "bad.tsv"
    good = "".join(f"uno dos {i}\tone two {i}\n" for i in range(60))
    bad.write_bytes(good.encode() + b"sin tabulador\n\xff\xfe\tx\n" + good.encode())
    caplog.set_level(logging.INFO)
    assert train_main(["--data", f"tsv:{bad}", "--skip-bad-lines", "--out", str(tmp_path / "run"),
                       *SMALL, "--steps", "1"]) == 0, caplog.text[-3000:]
    assert "2 bad line(s) skipped" in caplog.text
    assert "bad.tsv:61" in caplog.text and "bad.tsv:62" in caplog.text


def test_epochs_count_the_data_once_per_run_and_the_count_is_cached(tmp_path, caplog):
    train = tmp_path / "train.tsv.gz"
    import gzip

    with gzip.open(train, "wt", encoding="utf-8") as f:
        f.writelines(f"uno dos tres {i}\tone two three {i}\n" for i in range(400))
    out = tmp_path / "run"
    arguments = ["--data", f"tsv:{train}", "--out", str(out), *SMALL, "--steps-per-epoch", "2"]
    caplog.set_level(logging.INFO)
    assert train_main([*arguments, "--epochs", "1"]) == 0, caplog.text[-3000:]
    stats = json.loads((out / "data.json").read_text())
    (per_pass,) = stats["batches_per_pass"].values()
    assert f"one pass is {per_pass} batches" in caplog.text
    # 396 pairs, each row at least 2 tokens (a piece + EOS): at most 256 rows per 512 tokens.
    assert 2 <= per_pass <= 396
    assert stats["pairs"] + stats["held_out"] == 400 and stats["held_out"] == 4
    assert len((out / "dev.tsv").read_text().splitlines()) == 4
    caplog.clear()
    assert train_main([*arguments, "--epochs", "2"]) == 0, caplog.text[-3000:]
    assert "one pass is" not in caplog.text and "training pairs" not in caplog.text  # cached
    model = keras.models.load_model(out / "model.keras")
    assert int(model.optimizer.iterations) == 2 * per_pass  # 2 passes, whatever the epoch size


def test_a_bad_line_met_by_the_stream_stops_training_naming_it(tmp_path, caplog):
    train = tmp_path / "train.tsv"
    dev = tmp_path / "dev.tsv"
    dev.write_text("hola\thello\n")
    train.write_text("".join(f"uno dos {i}\tone two {i}\n" for i in range(100)))
    arguments = ["--data", f"tsv:{train},{dev}", "--out", str(tmp_path / "run"), *SMALL]
    assert train_main([*arguments, "--steps", "2"]) == 0, caplog.text[-3000:]
    # The file changes under a resumed run, which does not scan it again: the stream finds it.
    with open(train, "a") as f:
        f.write("uno\tdos\ttres\n")
    # In process: an exception other than the named error would fail the test here.
    assert train_main([*arguments, "--steps", "4"]) == 2, caplog.text[-3000:]
    assert f"{train}:101: 2 TAB separators, expected exactly 1" in caplog.text


def test_a_truncated_gzip_corpus_is_exit_2_naming_the_file(tmp_path, caplog):
    train = tmp_path / "train.tsv.gz"
    with gzip.open(train, "wt", encoding="utf-8") as f:
        f.write("".join(f"uno dos {i}\tone two {i}\n" for i in range(15000)))
    data = train.read_bytes()
    train.write_bytes(data[:len(data) // 2])
    dev = tmp_path / "dev.tsv"
    dev.write_text("hola\thello\n")
    # In process: an exception other than the named error would fail the test here.
    assert train_main(["--data", f"tsv:{train},{dev}", "--out", str(tmp_path / "run"), *SMALL,
                       "--steps", "2"]) == 2, caplog.text[-3000:]
    assert f"{train}: truncated gzip file" in caplog.text
    assert not (tmp_path / "run" / "model.keras").exists()


# Loaded at start-up by the training subprocess (PYTHONPATH): h5py's file creation fails as on
# a full disk (h5py's own OSError: errno 28, the name only in its message) from the Nth
# .weights.h5 the run writes on.
FULL_DISK_AFTER = """
import os
import h5py

_File = h5py.File
_written = []


def File(name, mode="r", *args, **kwargs):
    path = os.fspath(name) if isinstance(name, (str, os.PathLike)) else ""
    if path.endswith(".weights.h5") and mode == "w":
        _written.append(path)
        if len(_written) >= int(os.environ["FULL_DISK_AFTER"]):
            raise OSError(28, "Unable to synchronously create file (unable to open file: "
                          f"name = '{path}', errno = 28, error message = 'No space left on "
                          "device', flags = 13, o_flags = 242)")
    return _File(name, mode, *args, **kwargs)


h5py.File = File
"""


def test_a_full_disk_ends_the_run_in_one_line_and_the_rerun_resumes(tmp_path):
    """...and the resumed run goes on with the data order where it stopped: without dropout it
    ends with the weights of a run that was never interrupted."""
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(FULL_DISK_AFTER)
    out = tmp_path / "run"
    command = [sys.executable, "-m", "tfformer.cli.train", "--out", str(out), *SMALL,
               "--set", "dropout=0", "--steps", "6", "--steps-per-epoch", "2",
               "--backup-every", "1"]
    full = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env(
        PYTHONPATH=os.pathsep.join([str(inject), ROOT]), FULL_DISK_AFTER="3"))
    assert full.returncode == 1, full.stderr[-3000:]
    assert "Traceback" not in full.stderr
    errors = [line for line in full.stderr.splitlines() if "no space left on device" in line]
    assert len(errors) == 1, full.stderr[-3000:]
    assert f"{out}/backup/.tmp-step-" in errors[0] and ".weights.h5: no space left" in errors[0]
    assert "run the same command again to resume" in errors[0]

    rerun = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env())
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    # Resumed from the last backup before the disk filled, not from the start: the writes were
    # step 1's backup, epoch 1's checkpoint (step 2's backup links to it, no write), then step
    # 3's backup, which failed.
    assert "starting at step 2 of 6" in rerun.stderr, rerun.stderr[-3000:]
    assert "skipping the 2 batch(es) trained on before this resume" in rerun.stderr
    model = keras.models.load_model(out / "model.keras")
    assert int(model.optimizer.iterations) == 6
    with open(out / "metrics.csv") as f:
        assert [int(row["step"]) for row in csv.DictReader(f)] == [2, 4, 6]

    whole = tmp_path / "whole"
    command[command.index("--out") + 1] = str(whole)
    assert subprocess.run(command, capture_output=True, timeout=300, env=env()).returncode == 0
    uninterrupted = keras.models.load_model(whole / "model.keras")
    for resumed, straight in zip(model.weights, uninterrupted.weights, strict=True):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(resumed),
                                   keras.ops.convert_to_numpy(straight), atol=1e-6,
                                   err_msg=resumed.path)


def test_max_minutes_ends_the_run_early_and_saves_the_model(tmp_path, caplog):
    out = tmp_path / "run"
    caplog.set_level(logging.INFO)
    assert train_main(train_args(out, "--steps", "1000", "--steps-per-epoch", "4",
                                 "--max-minutes", "0.01")) == 0, caplog.text[-3000:]
    model = keras.models.load_model(out / "model.keras")
    assert 1 <= int(model.optimizer.iterations) < 1000
    assert "0.01 minutes of wall time used" in caplog.text
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert int(rows[-1]["step"]) == int(model.optimizer.iterations)


def test_stop_at_time_leaves_room_for_the_epoch_end():
    from tfformer.train.callbacks import StopAtTime

    now = [0.0]
    callback = StopAtTime(deadline=100.0, clock=lambda: now[0])
    callback.set_model(types.SimpleNamespace(stop_training=False))
    for t in (10, 20, 30):  # epoch 1: batches begin at 10, 20, 30; its end work ends at 55
        now[0] = t
        callback.on_train_batch_begin(0)
    now[0] = 55
    callback.on_epoch_begin(1)
    now[0] = 70
    callback.on_train_batch_begin(0)
    assert not callback.model.stop_training  # 70 + 25 < 100
    now[0] = 76
    callback.on_train_batch_begin(1)
    assert callback.model.stop_training and callback.stopped  # 76 + 25 >= 100


def test_bad_config_override_names_the_field(tmp_path, caplog):
    assert train_main(["--set", "d_model=100", "--set", "num_heads=3",
                       "--out", str(tmp_path / "run")]) == 2
    assert "d_model (100)" in caplog.text and "num_heads (3)" in caplog.text


def test_average_program_writes_the_mean_of_the_last_checkpoints(tmp_path):
    from tfformer.cli.average import main as average_main

    config = TransformerConfig(vocab_size=20, d_model=8, num_heads=2, d_ff=8,
                               num_encoder_layers=1, num_decoder_layers=1)
    (tmp_path / "config.json").write_text(config.to_json())
    model = Transformer(config)
    model.build()
    rng = np.random.default_rng(1)
    saved = []
    (tmp_path / "checkpoints").mkdir()
    for i in range(3):
        weights = [rng.normal(size=w.shape).astype(w.dtype) for w in model.get_weights()]
        model.set_weights(weights)
        model.save_weights(str(tmp_path / "checkpoints" / f"ckpt-{i + 1:05d}.weights.h5"))
        saved.append(weights)
    assert average_main([str(tmp_path), "--last", "2"]) == 0
    averaged = keras.models.load_model(tmp_path / "model-avg2.keras")
    for got, first, second in zip(averaged.get_weights(), saved[1], saved[2]):
        np.testing.assert_allclose(got, (first + second) / 2, rtol=1e-6, atol=1e-7)
    assert average_main([str(tmp_path / "nothing")]) == 2  # bad input: no such run


def test_tfds_without_the_package_is_a_clear_error(tmp_path):
    # Shadow tensorflow_datasets with a module that cannot be imported, installed or not.
    (tmp_path / "tensorflow_datasets.py").write_text(
        "raise ImportError(\"No module named 'tensorflow_datasets'\")\n")
    result = subprocess.run(
        [sys.executable, "-m", "tfformer.cli.train", "--data", "tfds:ted_hrlr_translate/pt_to_en",
         "--out", str(tmp_path / "run")], capture_output=True, text=True, timeout=300,
        env=env(PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}"))
    assert result.returncode == 2
    assert "pip install tensorflow-datasets" in result.stderr


def test_jit_auto_trains_compiled_packed_steps_where_they_pay(tmp_path, caplog, monkeypatch):
    """On a CPU without AVX-512 (the flags faked), `--jit auto` trains XLA-compiled steps on
    packed rows of min(128, max_length) tokens: one batch shape; the run records it."""
    from tfformer.train import jit

    monkeypatch.setattr(jit, "cpu_flags", lambda: {"avx2", "fma"})
    monkeypatch.setattr(jit, "has_accelerator", lambda: False)
    out = tmp_path / "run"
    caplog.set_level(logging.INFO)
    assert train_main(train_args(out, "--steps", "3", "--jit", "auto")) == 0, caplog.text[-3000:]
    assert "jit auto: compiled steps on packed rows of 64 tokens: a CPU without AVX-512" \
        in caplog.text
    recorded = json.load(open(out / "train_args.json"))
    assert (recorded["jit"], recorded["pack_length"]) == ("on", 64)
    model = keras.models.load_model(out / "model.keras")
    assert model.jit_compile is True and int(model.optimizer.iterations) == 3
    one_shape = r"epoch 1: 1 batch shape\(s\) so far, rows x length \(batches\): \d+x64 \(\d+\);"
    assert re.search(one_shape, caplog.text), caplog.text[-3000:]
