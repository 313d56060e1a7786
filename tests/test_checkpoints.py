"""A run's weight files: epoch checkpoints kept and averaged, backup names, SavedModel paths."""

import logging
import os

import numpy as np
import pytest

from tfformer import Transformer, TransformerConfig
from tfformer.contract import saved_model_dir
from tfformer.train.callbacks import KeepLastCheckpoints
from tfformer.train.checkpoints import (
    WeightsWriter,
    average_checkpoints,
    average_last,
    backup_name,
    checkpoint_name,
    list_backups,
    list_checkpoints,
)


def small_model():
    model = Transformer(TransformerConfig(vocab_size=20, d_model=8, num_heads=2, d_ff=8,
                                          num_encoder_layers=1, num_decoder_layers=1))
    model.build()
    return model


def test_checkpoint_averaging_equals_numpy_mean(tmp_path):
    config = TransformerConfig(vocab_size=20, d_model=16, num_heads=2, d_ff=32,
                               num_encoder_layers=1, num_decoder_layers=1)
    model = Transformer(config)
    model.build()
    rng = np.random.default_rng(0)
    saved = []
    for i in range(3):
        weights = [rng.normal(size=w.shape).astype(w.dtype) for w in model.get_weights()]
        model.set_weights(weights)
        path = str(tmp_path / f"ckpt-{i:05d}.weights.h5")
        model.save_weights(path)
        saved.append(weights)
    average_checkpoints(model, [str(tmp_path / f"ckpt-{i:05d}.weights.h5") for i in range(3)])
    for got, *versions in zip(model.get_weights(), *saved):
        np.testing.assert_allclose(got, np.mean(versions, axis=0), rtol=1e-6, atol=1e-7)


def test_keep_last_checkpoints_prunes_older_files(tmp_path):
    model = small_model()
    callback = KeepLastCheckpoints(str(tmp_path), keep=2)
    callback.set_model(model)
    for epoch in range(4):
        callback.on_epoch_end(epoch, {})
    assert [os.path.basename(p) for p in list_checkpoints(str(tmp_path))] == [
        "ckpt-00003.weights.h5", "ckpt-00004.weights.h5"]


def test_weights_writer_saves_a_step_once_and_links_its_second_file(tmp_path, monkeypatch):
    model = small_model()
    saves = []
    save_weights = model.save_weights
    monkeypatch.setattr(model, "save_weights", lambda path: (saves.append(path),
                                                             save_weights(path)))
    writer = WeightsWriter()
    checkpoint, backup = str(tmp_path / "ckpt.weights.h5"), str(tmp_path / "b" / "s.weights.h5")
    writer.write(model, checkpoint, 3)
    writer.write(model, backup, 3)  # the epoch's backup: the same step
    assert len(saves) == 1 and os.path.samefile(checkpoint, backup)
    assert not [name for name in os.listdir(tmp_path / "b") if name.startswith(".tmp-")]
    # Either name alone keeps the weights: removing the checkpoint leaves the backup whole.
    expected = model.get_weights()
    os.remove(checkpoint)
    other = small_model()
    other.load_weights(backup)
    for got, want in zip(other.get_weights(), expected):
        np.testing.assert_array_equal(got, want)
    # Another step is saved anew, as is a step whose file is gone, and a model without a step.
    later = str(tmp_path / "later.weights.h5")
    writer.write(model, later, 4)
    assert len(saves) == 2 and not os.path.samefile(later, backup)
    os.remove(later)
    writer.write(model, str(tmp_path / "again.weights.h5"), 4)
    writer.write(model, str(tmp_path / "x.weights.h5"), None)
    writer.write(model, str(tmp_path / "y.weights.h5"), None)
    assert len(saves) == 5
    # Where the file system has no hard links: a copy of the same bytes, still saved once.
    def no_links(source, destination):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_links)
    writer.write(model, str(tmp_path / "copy.weights.h5"), None)
    writer.write(model, str(tmp_path / "copy2.weights.h5"), None)
    writer.write(model, str(tmp_path / "first.weights.h5"), 5)
    writer.write(model, str(tmp_path / "second.weights.h5"), 5)
    assert len(saves) == 8
    assert (tmp_path / "second.weights.h5").read_bytes() == \
        (tmp_path / "first.weights.h5").read_bytes()
    assert not os.path.samefile(tmp_path / "first.weights.h5", tmp_path / "second.weights.h5")


def test_average_last_takes_the_newest_and_warns_when_there_are_fewer(tmp_path, caplog):
    model = small_model()
    directory = tmp_path / "checkpoints"
    directory.mkdir()
    saved = {}
    for epoch in (1, 2, 3):
        model.set_weights([np.full(w.shape, epoch, w.dtype) for w in model.get_weights()])
        model.save_weights(str(directory / checkpoint_name(epoch)))
        saved[epoch] = model.get_weights()
    paths = average_last(model, str(tmp_path), 2)
    assert [os.path.basename(p) for p in paths] == ["ckpt-00002.weights.h5",
                                                    "ckpt-00003.weights.h5"]
    assert model.get_weights()[0].flat[0] == pytest.approx(2.5)
    with caplog.at_level(logging.WARNING, logger="tfformer.train.checkpoints"):
        assert len(average_last(model, str(tmp_path), 5)) == 3
    assert "only 3 checkpoint(s) to average, not 5" in caplog.text


def test_average_last_of_a_run_without_checkpoints_names_the_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="checkpoints holds no checkpoint"):
        average_last(small_model(), str(tmp_path), 5)
    with pytest.raises(ValueError, match="last must be >= 1, got 0"):
        average_last(small_model(), str(tmp_path), 0)


def test_backups_sort_by_step_and_are_told_from_checkpoints(tmp_path):
    for name in (backup_name(10), backup_name(9), checkpoint_name(1)):
        (tmp_path / name).write_bytes(b"")
    assert [os.path.basename(p) for p in list_backups(str(tmp_path))] == [
        "step-000000009.weights.h5", "step-000000010.weights.h5"]
    assert [os.path.basename(p) for p in list_checkpoints(str(tmp_path))] == [
        "ckpt-00001.weights.h5"]


def test_saved_model_dir_is_the_path_or_its_highest_version(tmp_path):
    for version in ("1", "10", "2", "tmp-11"):
        (tmp_path / version).mkdir()
        (tmp_path / version / "saved_model.pb").write_bytes(b"")
    assert saved_model_dir(str(tmp_path / "2")) == str(tmp_path / "2")
    assert saved_model_dir(str(tmp_path)) == str(tmp_path / "10")
    assert saved_model_dir(str(tmp_path / "missing")) is None
