"""The benchmarks run end to end on small settings (their full runs are in benchmarks/results)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_data_scale_benchmark_streams_a_generated_corpus(tmp_path):
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "data_scale.py"), "--pairs", "3000",
         "--shards", "3", "--dir", str(tmp_path), "--vocab-size", "300", "--vocab-sample", "1000",
         "--batch-tokens", "2048", "--batches", "5", "--model-steps", "1",
         "--model-batch-tokens", "512"],
        capture_output=True, text=True, timeout=900,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["corpus"]["pairs"] == 3000 and report["corpus"]["files"] == 3
    vocabulary = report["vocabulary"]
    # No DEV file: 1% held out, the rest counted by the scan; the sample is bounded.
    assert vocabulary["pairs"] + vocabulary["held_out"] == 3000 and vocabulary["held_out"] == 30
    assert vocabulary["vocab_size"] <= 300
    pipeline = report["pipeline"]
    assert pipeline["timed_batches"] == 5 and pipeline["batches_per_second"] > 0
    assert pipeline["first_batch_shape"][0] * pipeline["first_batch_shape"][1] <= 2048
    assert report["base_model"]["timed_steps"] == 1
    assert report["base_model"]["batch_tokens"] == 512
    assert report["pipeline_vs_base_model"] == pytest.approx(
        pipeline["tokens_per_second"] / report["base_model"]["tokens_per_second"], abs=0.06)
    assert os.listdir(tmp_path) == []  # the corpus is not kept
