"""Training from a prepared store on the backend at hand: where only JAX is installed (the
no-TensorFlow run of `make test`) and on TensorFlow. Three kill -9s, and the resumed run ends
with the weights of an uninterrupted one (no dropout: the same batches in the same order)."""

import csv
import json
import os
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

from tfformer.data.builtin import builtin_pairs
from tfformer.data.pieces import SentencePieces, train_model
from tfformer.data.store import Store, write_store
from tfformer.model.transformer import Transformer  # noqa: F401 - registered for load_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BACKEND = os.environ.get("KERAS_BACKEND", "tensorflow")
SMALL = ["--set", "d_model=32", "--set", "num_heads=2", "--set", "d_ff=64",
         "--set", "num_encoder_layers=1", "--set", "num_decoder_layers=1",
         "--set", "max_length=32", "--set", "dropout=0", "--batch-tokens", "512",
         "--verbose", "0", "--backend", BACKEND]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store written without TensorFlow: SentencePiece trained and run in Python."""
    train = [p for p in builtin_pairs("train", 3000) if len(p[0].split()) <= 7][:600]
    dev = builtin_pairs("dev", 8)
    pieces = SentencePieces(train_model([s for pair in train for s in pair], 200))
    out = str(tmp_path_factory.mktemp("store") / "builtin")
    chunks = [([s for s, _ in train[i:i + 256]], [t for _, t in train[i:i + 256]])
              for i in range(0, len(train), 256)]
    write_store(out, pieces, chunks, dev, {"spec": "builtin (test)"})
    return Store.open(out)


def command(store, out, *extra):
    return [sys.executable, "-m", "tfformer.cli.train", "--data", f"prepared:{store.path}",
            "--out", str(out), *SMALL, *extra]


def run_env():
    return {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2",
            "KERAS_BACKEND": BACKEND}


def backup_step(out) -> int:
    try:
        with open(out / "backup" / "state.json") as f:
            return json.load(f)["step"]
    except (OSError, ValueError):
        return 0


def weights(out):
    return keras.saving.load_model(out / "model.keras", compile=False).get_weights()


TOTAL, PER_EPOCH = 12, 4
FLAGS = ("--steps", str(TOTAL), "--steps-per-epoch", str(PER_EPOCH), "--backup-every", "1",
         "--dev-sentences", "4", "--dev-beam-size", "2")


@pytest.fixture(scope="module")
def whole_run(store, tmp_path_factory):
    """An uninterrupted run on the store."""
    whole = tmp_path_factory.mktemp("runs") / "whole"
    result = subprocess.run(command(store, whole, *FLAGS), env=run_env(), capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    if BACKEND == "jax" and os.environ.get("TFFORMER_EXPECT_NO_TENSORFLOW"):
        assert "TensorFlow is not installed" in result.stderr  # the run had none to use
    return whole


@pytest.mark.slow
def test_three_kills_resume_to_the_weights_of_an_uninterrupted_run(store, whole_run, tmp_path):
    total, flags, whole = TOTAL, FLAGS, whole_run

    killed = tmp_path / "killed"
    log = tmp_path / "killed.txt"
    kills = []
    for kill_after in (2, 5, 9):  # mid-epoch, past an epoch end, in the last epoch
        with open(log, "a") as stderr:
            process = subprocess.Popen(command(store, killed, *flags), env=run_env(),
                                       stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            deadline = time.monotonic() + 300
            while backup_step(killed) < kill_after and process.poll() is None:
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.02)
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
        kills.append(backup_step(killed))
    assert kills == sorted(kills) and kills[-1] < total, kills
    result = subprocess.run(command(store, killed, *flags), env=run_env(), capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"starting at step {kills[-1]} of {total}" in result.stderr
    assert "skipping" not in result.stderr  # no batch read again to get there

    for a, b in zip(weights(whole), weights(killed), strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    with open(killed / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == [4, 8, 12]
    assert all(r["dev_bleu"] != "" and r["val_loss"] != "" for r in rows)
    with open(whole / "metrics.csv", newline="") as f:
        uninterrupted = list(csv.DictReader(f))
    # The same weights at each epoch's end, and each epoch's training metrics average all its
    # batches, as the uninterrupted run's do, though the kills (just after the backups of steps
    # 2, 5 and 9) resumed the epochs in their middle.
    for name in ("val_loss", "loss", "accuracy", "perplexity"):
        np.testing.assert_allclose([float(r[name]) for r in uninterrupted],
                                   [float(r[name]) for r in rows], rtol=1e-5, err_msg=name)


@pytest.mark.slow
def test_evaluate_scores_a_run_on_the_stores_dev_set_with_beam_search(store, whole_run,
                                                                      tmp_path):
    import sacrebleu

    out = tmp_path / "eval"
    result = subprocess.run(
        [sys.executable, "-m", "tfformer.cli.evaluate", str(whole_run), "--data",
         f"prepared:{store.path}", "--beam-size", "2", "--out", str(out)],
        env=run_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    hypotheses = (out / "hypotheses.txt").read_text().splitlines()
    references = [t for _, t in store.dev_pairs()]
    assert report["search"]["beam_size"] == 2 and report["sentences"] == len(references)
    assert len(hypotheses) == len(references) and any(hypotheses)
    assert report["bleu"] == round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2)
    # The search the report names: the model's beam search over the same sources.
    from tfformer.decode.keras_translator import load_keras_translator

    translator = load_keras_translator(whole_run, beam_size=2)
    sources = [s for s, _ in store.dev_pairs()]
    assert [text for text, _ in translator.translate_texts(sources[:3])] == hypotheses[:3]
    # A TSV test set evaluates there too (TensorFlow or not): the same pairs, the same scores;
    # a bad line is named with its file and line, exit 2.
    test = tmp_path / "dev.tsv"
    test.write_text("".join(f"{s}\t{t}\n" for s, t in store.dev_pairs()), encoding="utf-8")
    from_tsv = subprocess.run(
        [sys.executable, "-m", "tfformer.cli.evaluate", str(whole_run), "--data", f"tsv:{test}",
         "--beam-size", "2"], env=run_env(), capture_output=True, text=True, timeout=600)
    assert from_tsv.returncode == 0, from_tsv.stderr[-3000:]
    scored = json.loads(from_tsv.stdout.strip().splitlines()[-1])
    assert (scored["bleu"], scored["chrf"]) == (report["bleu"], report["chrf"])
    test.write_text("uno\tone\nsin tabulador\n", encoding="utf-8")
    bad = subprocess.run(
        [sys.executable, "-m", "tfformer.cli.evaluate", str(whole_run), "--data", str(test)],
        env=run_env(), capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and f"{test}:2: no TAB separator" in bad.stderr, bad.stderr[-2000:]


def test_the_runs_callbacks_let_keras_dispatch_the_next_step_without_waiting(store, tmp_path):
    import time as clock

    from tfformer.train import steps, store_inputs
    from tfformer.train.fit import fit_callbacks, waiting_callbacks
    from tfformer.train.settings import Budget, TrainSettings
    from tfformer.utils.run_dir import RunDir

    run = RunDir(tmp_path / "run")
    settings = TrainSettings(data=f"prepared:{store.path}", dev_sentences=2, max_minutes=5,
                             steps=10)
    data = store_inputs.prepare(run, chief=True, spec=settings.data)
    batches = store_inputs.assemble(run, data, batch_tokens=512, max_length=32, seed=0,
                                    batch_multiple=1)
    budget = Budget.from_settings(settings, batches.batches_per_pass, clock.monotonic())
    made = steps.make_callbacks(settings, run, data, batches, 32, BACKEND, True, budget)
    callbacks = fit_callbacks(budget.total_steps, made.all, steps.open_run_state(run, settings))
    assert waiting_callbacks(callbacks) == []
    # Keras' own decision (CallbackList), which a batch-end hook that waits would turn off.
    thread_safe = keras.backend.backend() == "jax"
    assert keras.callbacks.CallbackList(callbacks)._async_train == thread_safe
    waiting = [*callbacks, keras.callbacks.TerminateOnNaN()]
    assert waiting_callbacks(waiting) == ["TerminateOnNaN"]
    assert not keras.callbacks.CallbackList(waiting)._async_train


@pytest.mark.slow
def test_patience_stops_after_k_evaluations_without_a_better_dev_bleu_and_keeps_the_best(
        store, tmp_path):
    out, patience, total = tmp_path / "patient", 2, 60
    flags = ("--steps", str(total), "--steps-per-epoch", "2", "--dev-sentences", "4",
             "--patience", str(patience))
    result = subprocess.run(command(store, out, *flags), env=run_env(), capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    bleu = [float(row["dev_bleu"]) for row in rows]
    best = bleu.index(max(bleu))  # the first of equals
    # Stopped exactly when the last `patience` evaluations did not beat the best before them.
    assert len(bleu) - 1 - best == patience and int(rows[-1]["step"]) < total, bleu
    assert all(max(bleu[:i]) >= bleu[i] for i in range(best + 1, len(bleu)))
    record = json.loads((out / "early_stop.json").read_text())
    assert record["best_epoch"] == best + 1 and record["step"] == int(rows[-1]["step"])
    assert record["best_dev_bleu"] == pytest.approx(bleu[best], abs=1e-4)
    best_model = keras.saving.load_model(out / "model.keras", compile=False)
    kept = keras.saving.load_model(out / "model.keras", compile=False)
    kept.load_weights(out / "best.weights.h5")
    for a, b in zip(best_model.get_weights(), kept.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    # The best epoch's weights were saved once: its checkpoint, still among the last 5.
    assert os.path.samefile(out / "best.weights.h5",
                            out / "checkpoints" / f"ckpt-{best + 1:05d}.weights.h5")

    again = subprocess.run(command(store, out, *flags), env=run_env(), capture_output=True,
                           text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "nothing to train" in again.stderr
    with open(out / "metrics.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == len(rows)


def test_patience_needs_dev_bleu():
    from tfformer.train.settings import TrainSettings

    with pytest.raises(ValueError, match="patience needs dev BLEU: dev_sentences"):
        TrainSettings(patience=2, dev_sentences=0)
