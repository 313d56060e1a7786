"""tfformer.train.inputs: a run directory keeps the data it was started on; `assemble` gives
a run's training stream, dev batches and batches per pass."""

import gzip
import os

import pytest

from tfformer.data import tsv_lines
from tfformer.data.batching import make_stream
from tfformer.data.builtin import builtin_pairs
from tfformer.data.sources import DataError
from tfformer.train import inputs
from tfformer.utils.run_dir import RunDir, read_data_stats


def prepare(run, spec):
    return inputs.prepare(run, chief=True, spec=spec, skip_bad_lines=False, seed=0,
                            vocab_size=200, vocab_sample=1000)


def test_a_run_resumes_only_on_the_data_it_was_started_on(tmp_path):
    run = RunDir(tmp_path / "run")
    first = prepare(run, "builtin:300")
    vocabulary = open(run.tokenizer, "rb").read()
    # The same data: the saved vocabulary is used as it is.
    assert prepare(run, "builtin:300").tokenizer.vocab_size == first.tokenizer.vocab_size
    assert open(run.tokenizer, "rb").read() == vocabulary
    with pytest.raises(ValueError, match=r"is a run on data 'builtin:300', not 'builtin:400': "
                                         r"give a new run directory"):
        prepare(run, "builtin:400")
    assert open(run.tokenizer, "rb").read() == vocabulary
    assert read_data_stats(run)["spec"] == "builtin:300"


def test_a_resume_checks_only_the_gzip_files_changed_since_the_scan(tmp_path, monkeypatch):
    # Every .gz is decompressed whole when a run opens it (a cut one would train silently on
    # part of itself); a resume trusts the files whose size and mtime the scan recorded.
    train = tmp_path / "train.tsv.gz"
    lines = "".join(f"{s}\t{t}\n" for s, t in builtin_pairs("train", 400))
    with gzip.open(train, "wt", encoding="utf-8") as f:
        f.write(lines)
    run = RunDir(tmp_path / "run")
    checked = []
    check = tsv_lines.check_file
    monkeypatch.setattr(tsv_lines, "check_file",
                        lambda path: (checked.append(path), check(path)))
    spec = f"tsv:{train}"
    prepare(run, spec)
    assert checked.count(str(train)) == 1
    prepare(run, spec)  # resumed: nothing changed, nothing decompressed again
    assert checked.count(str(train)) == 1
    # Cut after the run started (a copy interrupted over it): checked again, and refused.
    data = train.read_bytes()
    train.write_bytes(data[:len(data) // 2])
    os.utime(train, (1, 1))
    with pytest.raises(DataError, match="truncated gzip file"):
        prepare(run, spec)
    assert checked.count(str(train)) == 2


def test_assemble_gives_the_stream_the_dev_batches_and_the_pass_it_counts(tmp_path):
    run = RunDir(tmp_path / "run")
    data = prepare(run, "builtin:300")
    batches = inputs.assemble(run, data, batch_tokens=512, max_length=32, seed=0,
                                skip_bad_lines=False, batch_multiple=1, bucket_growth=1.25,
                                shuffle_buffer_size=64)
    assert sum(1 for _ in batches.dev) == int(batches.dev.cardinality())
    first = [target.tolist() for _, target in batches.train(0).take(3).as_numpy_iterator()]
    # A resumed run skips what it trained on: the same stream from there on.
    assert [target.tolist() for _, target in batches.train(2).take(1).as_numpy_iterator()] \
        == first[2:]
    assert batches.stats.read()["batches"] >= 3
    assert batches.counters.read()["skipped"] == 0
    assert "batches_per_pass" not in read_data_stats(run)  # counted only when asked
    per_pass = batches.batches_per_pass()
    assert per_pass == sum(1 for _ in make_stream(
        data.corpus.train_pairs(), data.tokenizer, batch_tokens=512, max_length=32,
        bucket_growth=1.25, shuffle_buffer_size=0)) > 0
    assert list(read_data_stats(run)["batches_per_pass"].values()) == [per_pass]  # cached
