"""Resumable training from Python: backups restore the whole optimizer, epochs keep their true
steps across an interruption, and history files are views of the committed state."""

import csv
import json
import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfformer import (
    Transformer,
    TransformerConfig,
    compile_transformer,
    paper_optimizer,
)
from tfformer.train.callbacks import RunState
from tfformer.train.fit import fit_resumable
from tfformer.train.state import history_csv, logged_tensorboard_steps
from tfformer.utils.files import atomic_write_text, full_disk_path, remove_temporaries

CONFIG = TransformerConfig(vocab_size=30, d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1,
                           num_decoder_layers=1, dropout=0.0)
WARMUP_STEPS = 4


def endless_batches(seed=0):
    rng = np.random.default_rng(seed)
    source = rng.integers(4, 30, size=(64, 7)).astype(np.int32)
    target = rng.integers(4, 30, size=(64, 6)).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices(
        ((source, target[:, :-1]), target[:, 1:])).batch(4).repeat()


def new_model(accumulation=None):
    model = Transformer(CONFIG)
    model.build()
    compile_transformer(model, optimizer=paper_optimizer(
        CONFIG.d_model, WARMUP_STEPS, gradient_accumulation_steps=accumulation))
    return model


class Interrupt(keras.callbacks.Callback):
    """Raises once the optimizer reaches `step`: a crash between two backups."""

    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations) >= self.step:
            raise KeyboardInterrupt


def test_restore_brings_back_every_optimizer_variable(tmp_path):
    model = new_model()
    state = RunState(str(tmp_path), backup_every=3)
    assert fit_resumable(model, endless_batches(), run_state=state, total_steps=7,
                         steps_per_epoch=4, verbose=0) == 7
    # Adam's first and second moments and the step count, in the optimizer's own order.
    saved = [(v.path, v.numpy()) for v in model.optimizer.variables]
    weights = model.get_weights()
    assert any(np.abs(m).max() > 0 for path, m in saved if "momentum" in path)
    assert any(np.abs(m).max() > 0 for path, m in saved if "velocity" in path)

    restored = new_model()
    assert RunState(str(tmp_path), backup_every=3).restore(restored) == 7
    assert len(restored.optimizer.variables) == len(saved)
    for variable, (path, value) in zip(restored.optimizer.variables, saved):
        assert variable.path.split("/")[-1][-20:] == path.split("/")[-1][-20:]
        np.testing.assert_array_equal(variable.numpy(), value, err_msg=path)
    for got, want in zip(restored.get_weights(), weights):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("accumulation", [None, 2])
def test_interrupted_run_finishes_its_epoch_and_keeps_true_epochs_and_steps(tmp_path, accumulation):
    batches_per_update = accumulation or 1
    steps_per_epoch = 4 * batches_per_update  # 4 updates an epoch
    model = new_model(accumulation)
    state = RunState(str(tmp_path), backup_every=1)
    with pytest.raises(KeyboardInterrupt):
        fit_resumable(model, endless_batches(), run_state=state, total_steps=10,
                      steps_per_epoch=steps_per_epoch, callbacks=[Interrupt(6)], verbose=0)
    assert RunState(str(tmp_path), backup_every=1).step == 5  # step 6 crashed before its backup

    resumed = new_model(accumulation)
    state = RunState(str(tmp_path), backup_every=1)
    assert fit_resumable(resumed, endless_batches(1), run_state=state, total_steps=10,
                         steps_per_epoch=steps_per_epoch, verbose=0) == 10
    assert [(row["epoch"], row["step"]) for row in state.history] == [(1, 4), (2, 8), (3, 10)]
    with open(tmp_path / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(int(r["epoch"]), int(r["step"])) for r in rows] == [(1, 4), (2, 8), (3, 10)]
    # A finished run takes no further step.
    again = new_model(accumulation)
    assert fit_resumable(again, endless_batches(), run_state=RunState(str(tmp_path), 1),
                         total_steps=10, steps_per_epoch=steps_per_epoch, verbose=0) == 10


def test_publish_rewrites_the_csv_and_completes_tensorboard_without_duplicates(tmp_path):
    history = [{"epoch": 1, "step": 5, "loss": 2.5, "val_loss": 2.75},
               {"epoch": 2, "step": 10, "loss": 2.0, "val_loss": 2.25}]

    def state_with_history():
        state = RunState(str(tmp_path), backup_every=1)
        state.state["history"] = history
        return state

    (tmp_path / "metrics.csv").write_text("epoch,step,loss\n1,5,2.5\n2,10,2.0\n3,1")  # torn row
    state = state_with_history()
    state.publish()
    state.publish()
    state.on_train_end()
    state_with_history().publish()  # as a new process would: reads what is logged first
    assert (tmp_path / "metrics.csv").read_text() == history_csv(state.history)
    train = logged_tensorboard_steps(str(tmp_path / "logs" / "train"))
    validation = logged_tensorboard_steps(str(tmp_path / "logs" / "validation"))
    assert train == {("epoch_loss", 5), ("epoch_loss", 10)}
    assert validation == {("epoch_loss", 5), ("epoch_loss", 10)}
    event_steps = []
    for name in os.listdir(tmp_path / "logs" / "train"):
        for event in tf.compat.v1.train.summary_iterator(str(tmp_path / "logs" / "train" / name)):
            event_steps += [event.step for _ in event.summary.value]
    assert sorted(event_steps) == [5, 10]


def test_history_csv_keeps_every_column_in_order():
    text = history_csv([{"epoch": 1, "step": 3, "loss": 1.0},
                        {"epoch": 2, "step": 6, "loss": 0.5, "dev_bleu": 7.0}])
    assert text.splitlines() == ["epoch,step,loss,dev_bleu", "1,3,1.0,", "2,6,0.5,7.0"]


def test_a_torn_write_leaves_the_old_file_and_its_leftover_is_removed(tmp_path):
    target = tmp_path / "state.json"
    atomic_write_text(str(target), json.dumps({"step": 1}))

    def killed_midway(temporary):
        with open(temporary, "w") as f:
            f.write('{"step": 2')
        raise KeyboardInterrupt  # the process dies here, before the rename

    from tfformer.utils.files import atomic_write

    with pytest.raises(KeyboardInterrupt):
        atomic_write(str(target), killed_midway)
    assert json.loads(target.read_text()) == {"step": 1}
    assert remove_temporaries(str(tmp_path)) == [".tmp-state.json"]
    assert os.listdir(tmp_path) == ["state.json"]


def test_a_backup_naming_a_missing_weights_file_is_a_clear_error(tmp_path):
    (tmp_path / "backup").mkdir()
    (tmp_path / "backup" / "state.json").write_text(
        json.dumps({"step": 3, "weights": "step-000000003.weights.h5", "history": []}))
    with pytest.raises(FileNotFoundError, match="step-000000003.weights.h5"):
        RunState(str(tmp_path), backup_every=1)


SMALL_ARCHITECTURE = dict(d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1,
                          num_decoder_layers=1, max_length=64)
LEGACY_RUN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "run-v0.1")


def small_settings(**changes):
    from tfformer.train.settings import TrainSettings

    return TrainSettings(**{**dict(data="builtin:300", steps_per_epoch=2, backup_every=1,
                                   batch_tokens=512, vocab_size=120, dev_sentences=0,
                                   verbose=0, warmup_steps=10), **changes})


def test_run_api_trains_and_resumes_from_python(tmp_path):
    from tfformer import run

    out = tmp_path / "run"
    first = run.train(out, "tiny", small_settings(steps=2), SMALL_ARCHITECTURE)
    assert first.step == 2 and [r["step"] for r in first.history] == [2]
    # The same run, asked to go further: it continues from its backup, not from step 0.
    second = run.train(out, "tiny", small_settings(steps=4), SMALL_ARCHITECTURE)
    assert second.step == 4 and [(r["epoch"], r["step"]) for r in second.history] == [
        (1, 2), (2, 4)]
    model = keras.models.load_model(first.run_dir.model)
    assert int(model.optimizer.iterations) == 4
    # The epoch's checkpoint and its backup hold one step's weights: one file, saved once.
    backup = out / "backup" / json.loads((out / "backup" / "state.json").read_text())["weights"]
    assert os.path.samefile(backup, out / "checkpoints" / "ckpt-00002.weights.h5")
    with pytest.raises(ValueError, match="d_ff: 32 -> 64"):
        run.train(out, "tiny", small_settings(steps=6), {**SMALL_ARCHITECTURE, "d_ff": 64})
    averaged = run.average(out, last=2)
    assert os.path.basename(averaged) == "model-avg2.keras"


def test_a_run_dir_written_before_the_config_split_loads_and_resumes(tmp_path):
    from tfformer import run
    from tfformer.decode.translator import load_translator

    old = tmp_path / "old"
    shutil.copytree(LEGACY_RUN, old)
    translator = load_translator(old, max_output_extra=4)  # its model.keras still loads
    assert translator.beam_size == 4 and translator.model.transformer_config.vocab_size == 120
    assert len(translator.translate_texts(["hola"])) == 1
    result = run.train(old, "tiny", small_settings(steps=6), SMALL_ARCHITECTURE)
    assert [(r["epoch"], r["step"]) for r in result.history] == [(1, 2), (2, 4), (3, 6)]


def test_a_backup_of_another_format_is_refused_not_overwritten(tmp_path):
    (tmp_path / "backup").mkdir()
    (tmp_path / "backup" / "training_metadata.json").write_text('{"epoch": 1, "batch": 4}')
    (tmp_path / "metrics.csv").write_text("epoch,loss\n0,2.5\n")
    with pytest.raises(ValueError, match="without state.json"):
        RunState(str(tmp_path), backup_every=1)
    assert (tmp_path / "metrics.csv").read_text() == "epoch,loss\n0,2.5\n"


def test_weights_renamed_into_place_before_the_first_state_json_are_not_a_backup(tmp_path):
    # A kill between the first weights file's rename and state.json: nothing was committed.
    (tmp_path / "backup").mkdir()
    (tmp_path / "backup" / "step-000000001.weights.h5").write_bytes(b"uncommitted")
    state = RunState(str(tmp_path), backup_every=1)
    assert state.step == 0 and os.listdir(tmp_path / "backup") == []


def test_full_disk_path_names_the_file_of_a_full_disk_and_nothing_else():
    import errno

    assert full_disk_path(OSError(errno.ENOSPC, "No space left on device", "/r/a.csv")) \
        == "/r/a.csv"
    assert full_disk_path(OSError(errno.EDQUOT, "Disk quota exceeded")) == ""
    h5py_style = OSError(28, "Unable to synchronously create file (unable to open file: "
                         "name = '/r/backup/.tmp-step-000000035.weights.h5', errno = 28, "
                         "error message = 'No space left on device', flags = 13)")
    try:
        try:
            raise h5py_style
        except OSError as error:
            raise RuntimeError("saving the backup failed") from error
    except RuntimeError as wrapped:  # Keras-style wrapping: the cause is followed
        assert full_disk_path(wrapped) == "/r/backup/.tmp-step-000000035.weights.h5"
    # TensorFlow's errors are no OSError: the message tells.
    assert full_disk_path(RuntimeError("/r/events: No space left on device")) == ""
    assert full_disk_path(OSError(errno.EACCES, "Permission denied", "/r/a.csv")) is None
    assert full_disk_path(ValueError("bad")) is None
