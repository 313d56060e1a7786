"""benchmarks/decoding/op_cost.py: the line it fits through its timings, its arguments, and its
report (its full runs are benchmarks/results/op_cost*.json)."""

import json

import pytest

from tests.benchmark_script import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("op_cost")


def test_the_fit_splits_a_call_into_cost_per_op_and_per_step(bench):
    # STEPS steps, each 5 us of loop and k ops of 0.25 us: ms = STEPS * (5 + 0.25 k) / 1000
    ks = [16, 64, 256]
    ms = [bench.STEPS * (5 + 0.25 * k) / 1000 for k in ks]
    per_op, per_step = bench.fit(ks, ms)
    assert per_op == pytest.approx(0.25) and per_step == pytest.approx(5)
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--ks", "8", "8"])
    assert exit_.value.code == 2


def test_the_report_names_the_machine_and_fits_each_form_and_row_count(bench, capsys):
    from tensorflow.python.util import _pywrap_util_port

    assert bench.main(["--rows", "1", "3", "--ks", "2", "6", "--reps", "1", "--width", "8"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["onednn"] == bool(_pywrap_util_port.IsMklEnabled())
    assert report["width"] == 8 and report["steps"] == bench.STEPS and report["cpu_flags"]
    assert [(row["form"], row["rows"]) for row in report["rows"]] == [
        ("elementwise", 1), ("elementwise", 3), ("matmul_bias", 1), ("matmul_bias", 3)]
    for row in report["rows"]:
        assert row["ops_per_step"] == [2, 6] and len(row["median_ms"]) == 2
        assert all(ms > 0 for ms in row["median_ms"])
        # The slope through the reported (rounded to the us) times.
        assert row["us_per_op"] == pytest.approx(
            bench.fit([2, 6], row["median_ms"])[0], abs=0.005)
