"""tfformer.data.run_data: a run directory keeps the data it was started on; `assemble` gives
a run's training stream, dev batches and batches per pass."""

import pytest

from tfformer.data import run_data
from tfformer.data.batching import make_stream
from tfformer.run_dir import RunDir


def prepare(run, spec):
    return run_data.prepare(run, chief=True, spec=spec, skip_bad_lines=False, seed=0,
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
    assert run_data.read_stats(run)["spec"] == "builtin:300"


def test_assemble_gives_the_stream_the_dev_batches_and_the_pass_it_counts(tmp_path):
    run = RunDir(tmp_path / "run")
    data = prepare(run, "builtin:300")
    batches = run_data.assemble(run, data, batch_tokens=512, max_length=32, seed=0,
                                skip_bad_lines=False, batch_multiple=1, bucket_growth=1.25,
                                shuffle_buffer_size=64)
    assert sum(1 for _ in batches.dev) == int(batches.dev.cardinality())
    first = [target.tolist() for _, target in batches.train(0).take(3).as_numpy_iterator()]
    # A resumed run skips what it trained on: the same stream from there on.
    assert [target.tolist() for _, target in batches.train(2).take(1).as_numpy_iterator()] \
        == first[2:]
    assert batches.stats.read()["batches"] >= 3
    assert batches.counters.read()["skipped"] == 0
    assert "batches_per_pass" not in run_data.read_stats(run)  # counted only when asked
    per_pass = batches.batches_per_pass()
    assert per_pass == sum(1 for _ in make_stream(
        data.corpus.train_pairs(), data.tokenizer, batch_tokens=512, max_length=32,
        bucket_growth=1.25, shuffle_buffer_size=0)) > 0
    assert list(run_data.read_stats(run)["batches_per_pass"].values()) == [per_pass]  # cached
