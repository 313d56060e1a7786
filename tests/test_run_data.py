"""tfformer.run_data: a run directory keeps the data it was started on."""

import pytest

from tfformer import run_data
from tfformer.run_dir import RunDir


def prepare(run, data):
    return run_data.prepare(run, chief=True, data=data, skip_bad_lines=False, seed=0,
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
