"""benchmarks/decoding/decode_threads.py: its thread settings and how it pairs runs by round (its
full run is benchmarks/results/decode_threads.json)."""

import pytest

from tests.benchmark_script import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("decode_threads")


def formats_row(search, batch, ratio, ms):
    return {"preset": "tiny", "search": search, "batch": batch, "savedmodel-fp32": {
        "median_ms": ms}, "over_ctranslate2_fp32": {"savedmodel-fp32": ratio}}


def test_settings_set_both_pools_or_neither(bench, monkeypatch):
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "7")
    assert "TF_NUM_INTRAOP_THREADS" not in bench.environment("default")
    env = bench.environment("1/2")
    assert (env["TF_NUM_INTRAOP_THREADS"], env["TF_NUM_INTEROP_THREADS"]) == ("1", "2")
    for bad in ("0/1", "1", "a/b", "1/-1", "default,onednn=2", "1/1,mkl=0", "0/1,onednn=0"):
        with pytest.raises(ValueError, match=f"got '{bad}'"):
            bench.environment(bad)


def test_onednn_is_set_only_where_the_setting_names_it(bench, monkeypatch):
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "1")
    assert "TF_ENABLE_ONEDNN_OPTS" not in bench.environment("default")  # TensorFlow's choice
    assert "TF_ENABLE_ONEDNN_OPTS" not in bench.environment("1/1")
    env = bench.environment("default,onednn=0")
    assert env["TF_ENABLE_ONEDNN_OPTS"] == "0" and "TF_NUM_INTRAOP_THREADS" not in env
    env = bench.environment("1/2,onednn=1")
    assert (env["TF_ENABLE_ONEDNN_OPTS"], env["TF_NUM_INTRAOP_THREADS"],
            env["TF_NUM_INTEROP_THREADS"]) == ("1", "1", "2")


def test_summary_pairs_each_setting_with_the_first_of_its_round(bench):
    # Round 1 ran on a slower machine: both settings' ratios to CTranslate2 moved, not their
    # ratio to each other.
    runs = [
        {"round": 0, "setting": "default", "formats": [formats_row("greedy", 1, 1.2, 44.0)]},
        {"round": 0, "setting": "1/1", "formats": [formats_row("greedy", 1, 0.6, 22.0)]},
        {"round": 1, "setting": "default", "formats": [formats_row("greedy", 1, 1.6, 60.0)]},
        {"round": 1, "setting": "1/1", "formats": [formats_row("greedy", 1, 1.2, 40.0)]},
        {"round": 2, "setting": "default", "formats": [formats_row("greedy", 1, 1.0, 40.0)]},
        {"round": 2, "setting": "1/1", "formats": [formats_row("greedy", 1, 0.7, 30.0)]},
    ]
    summary = {row["setting"]: row for row in bench.summarize(runs)}
    assert summary["default"]["time_over_default"] == 1.0
    # Per round 0.5, 0.75, 0.7: the median; the medians of the ratios and times alike.
    assert summary["1/1"]["time_over_default"] == 0.7
    assert summary["1/1"]["over_ctranslate2_fp32"] == 0.7
    assert summary["1/1"]["savedmodel_fp32_ms"] == 30.0 and summary["1/1"]["rounds"] == 3
    # Our milliseconds against the first setting's of the round: 0.5, 0.667, 0.75.
    assert summary["default"]["ms_over_default"] == 1.0
    assert summary["1/1"]["ms_over_default"] == 0.67
    assert {row["search"] for row in summary.values()} == {"greedy"}


def test_summary_gives_the_median_floor_where_rows_have_one(bench):
    # Batch 1 rows carry the matmul floor over CTranslate2 fp32; batch 32 rows do not.
    runs = [{"round": round_, "setting": "default", "formats": [
        {**formats_row("greedy", 1, 2.0, 300.0), "floor_over_ctranslate2_fp32": floor},
        formats_row("greedy", 32, 1.5, 900.0)]} for round_, floor in enumerate((1.7, 1.5, 1.6))]
    summary = {row["batch"]: row for row in bench.summarize(runs)}
    assert summary[1]["floor_over_ctranslate2_fp32"] == 1.6
    assert "floor_over_ctranslate2_fp32" not in summary[32]
