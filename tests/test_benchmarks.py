"""The benchmarks run end to end on small settings (their full runs are in benchmarks/results)."""

import json
import os
import subprocess
import sys

import pytest

from tests.benchmark_script import load_benchmark

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_data_scale_benchmark_streams_a_generated_corpus(tmp_path):
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "data", "data_scale.py"),
         "--pairs", "3000",
         "--shards", "3", "--dir", str(tmp_path), "--vocab-size", "300", "--vocab-sample", "1000",
         "--batch-tokens", "2048", "--batches", "5", "--model-steps", "1",
         "--model-layers", "1", "--model-batch-tokens", "512"],
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
    assert report["base_model"]["timed_steps"] == 1 and report["base_model"]["layers"] == 1
    assert report["base_model"]["batch_tokens"] == 512
    assert report["pipeline_vs_base_model"] == pytest.approx(
        pipeline["tokens_per_second"] / report["base_model"]["tokens_per_second"], abs=0.06)
    assert os.listdir(tmp_path) == []  # the corpus is not kept


@pytest.mark.slow
def test_batch_shapes_benchmark_reports_bounded_shapes_and_compilations():
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "training", "batch_shapes.py"), "--data",
         "builtin", "--limit", "300", "--vocab-size", "300", "--first", "2", "--more", "1",
         "--pack-length", "64", "--batch-tokens", "1024",
         "--contenders", "tensorflow,jax,jax_packed",
         # JAX's compilation cache (`make test` sets it): a compile or a load is one event.
         "--xla-cache"],
        capture_output=True, text=True, timeout=900,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["pairs"] == 300 and report["data"] == "builtin" and report["xla_cache"]
    fine, coarse = report["grid"]
    assert (fine["bucket_growth"], coarse["bucket_growth"]) == (1.1, 1.25)
    for grid in (fine, coarse):
        assert 1 <= grid["distinct_shapes"] == len(grid["shapes"]) <= grid["buckets"]
        assert sum(grid["shapes"].values()) == grid["batches"]
        # Padding to the bucket's length pads at least as much as padding to each batch's
        # longest pair would.
        assert 0 < grid["padding_if_padded_to_each_batch_longest"] <= grid["padding"] < 0.5
    # The fine grid's buckets are so narrow that their batches reach their length anyway (a
    # repeated stream has no filled-up last batches).
    assert fine["padding"] - fine["padding_if_padded_to_each_batch_longest"] < 0.01
    assert coarse["buckets"] < fine["buckets"]
    plain, jax = report["training"]["tensorflow"], report["training"]["jax"]
    assert plain["bucket_growth"] == 1.1 and jax["bucket_growth"] == 1.25
    # JAX compiles its train step once per shape, no more.
    assert 1 <= jax["train_step_compilations"] <= jax["distinct_shapes"]
    assert plain["train_step_compilations"] is None
    assert plain["first_updates"] == 2 and plain["more_target_tokens_per_second"] > 0
    # Packed rows: one shape, one compilation, and less padding than the compiled grid.
    packed, jax_packed = report["packed"], report["training"]["jax_packed"]
    # 1024-token batches of 64-token rows
    assert packed["distinct_shapes"] == 1 and list(packed["shapes"]) == ["16x64"]
    assert packed["padding"] < coarse["padding"]
    assert jax_packed["distinct_shapes"] == jax_packed["train_step_compilations"] == 1


def test_keras_search_benchmark_finds_the_graph_search_tokens_under_jax():
    """Both backends in one run on the same weights: JAX's compiled beam search gives the
    TensorFlow graph's tokens (the SavedModel's search). Near-ties of the random model may let
    the backends' last float bits reorder a few lower-ranked hypotheses; a wrong rule would
    change most of them."""
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "decoding", "keras_search.py"),
         "--preset", "tiny",
         "--vocab-size", "300", "--sentences", "6", "--length", "9", "--extra", "12",
         "--repeats", "1"], capture_output=True, text=True, timeout=600,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    graph, compiled = report["contenders"]["tensorflow_graph"], report["contenders"]["jax_compiled"]
    assert compiled["best_equal_to_tensorflow"] >= 5 / 6
    assert compiled["hypotheses_equal_to_tensorflow"] >= 0.75
    assert compiled["output_positions"] == graph["output_positions"] <= 9 + 12
    assert compiled["median_s"] > 0 and graph["median_s"] > 0


def test_alignments_benchmark_finds_reordered_phrases_and_the_words_of_pieces():
    """benchmarks/decoding/alignments.py's gold: Spanish NOUN ADJECTIVE phrases whose English is
    ADJECTIVE NOUN, and the word each SentencePiece piece belongs to."""
    from tfformer.data.builtin import builtin_pairs

    benchmark = load_benchmark("alignments")
    assert benchmark.word_of_pieces(["\u2581Los", "\u2581per", "ros", "\u2581rojo", "s", "."]) \
        == [0, 1, 1, 2, 2, 2]
    nouns = {"perros": "dogs", "casa": "house"}
    adjectives = {"rojos": "red", "azul": "blue"}
    pairs = [("Los perros rojos comen.", "The red dogs eat."),
             ("La casa azul.", "The house is blue."),  # not ADJECTIVE NOUN in English
             ("Hola.", "Hello.")]
    assert benchmark.phrases(pairs, nouns, adjectives) == [
        ("Los perros rojos comen.", 1, 2, "red", "dogs")]
    found = benchmark.phrases(builtin_pairs("test", 300), *benchmark.gold_words())
    assert len(found) >= 30, len(found)


@pytest.mark.slow
def test_opus_mt_benchmark_times_each_engine_on_the_same_imported_weights(tmp_path):
    out = tmp_path / "opus_mt.json"
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "decoding", "opus_mt.py"),
         "--d-model", "32",
         "--layers", "1", "--heads", "2", "--d-ff", "64", "--vocab-size", "1000", "--reps", "1",
         "--rounds", "1", "--batches", "2", "--output-tokens", "40", "--out", str(out)],
        capture_output=True, text=True, timeout=900,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["model"]["vocab_size"] == 1000 and report["cpu_flags"] is not None
    assert report["import"]["seconds"] > 0 and report["import"]["peak_memory_mib"] > 100
    assert [(row["search"], row["batch"]) for row in report["rows"]] == [
        ("greedy", 2), ("beam4", 2)]
    for row in report["rows"]:
        ms = row["median_ms"]
        assert row["savedmodel_over_transformers"] == pytest.approx(
            ms["savedmodel"] / ms["transformers"], abs=1e-3)
        assert row["savedmodel_over_ctranslate2_fp32"] == pytest.approx(
            ms["savedmodel"] / ms["ctranslate2"], abs=1e-3)
        outputs = row["first_output"]
        assert all(outputs.values())  # EOS is impossible: every engine writes to the limit
        if row["search"] == "greedy":  # the same weights, the same tokens
            assert outputs["savedmodel"] == outputs["transformers"]
