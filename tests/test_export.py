"""Translator and SavedModel export: the contract stock TF Serving relies on."""

import json
import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfformer.cli.export import main as export_main
from tfformer.export import (
    ExportError,
    check_ops,
    export_saved_model,
    saved_model_ops,
    translate_in_fresh_process,
)
from tfformer.search import beam_search, greedy_search
from tfformer.serving import client, server
from tfformer.translator import load_translator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTRA = 12  # max_output_extra: random weights rarely emit EOS, so keep outputs short
SENTENCES = ["Los tres perros rojos comen manzanas verdes.", "Una hermana visita el puente.",
             "¿Dónde está la biblioteca?", "", "hola"]


@pytest.fixture(scope="module")
def run_dir(make_run_dir):
    """A run dir as training leaves it: tokenizer.model + model.keras (random weights)."""
    return make_run_dir(seed=11, pairs=2000, vocab_size=300, d_model=32, num_heads=4, d_ff=64,
                        num_encoder_layers=2, num_decoder_layers=2)


@pytest.fixture(scope="module")
def translator(run_dir):
    return load_translator(run_dir, max_output_extra=EXTRA)


@pytest.fixture(scope="module")
def exported(translator, tmp_path_factory):
    base = tmp_path_factory.mktemp("models")
    path = export_saved_model(translator, base, "tfformer", 1, check_sentences=SENTENCES)
    return base, path


def test_export_writes_the_tf_serving_layout_and_nothing_else(exported):
    base, path = exported
    assert path == os.path.join(base, "tfformer", "1")
    assert {"assets", "saved_model.pb", "variables"} <= set(os.listdir(path))
    assert os.listdir(os.path.join(base, "tfformer")) == ["1"]  # no staging dir left


def test_fresh_process_reload_reproduces_translations(exported, translator):
    _, path = exported
    expected = translator.translate_texts(SENTENCES)
    got = translate_in_fresh_process(path, SENTENCES)
    assert got["modules"] == []  # tfformer was not imported: the export stands alone
    assert got["translations"] == [text for text, _ in expected]
    np.testing.assert_allclose(got["scores"], [score for _, score in expected], atol=1e-4)
    assert len(set(got["translations"])) > 2  # different inputs, different outputs


def test_saved_model_cli_shows_string_in_string_out_signatures(exported):
    _, path = exported
    cli = shutil.which("saved_model_cli", path=os.path.dirname(sys.executable))
    result = subprocess.run([cli, "show", "--dir", path, "--all"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    for name in ("serving_default", "translate"):
        section = result.stdout.split(f"signature_def['{name}']:")[1].split("signature_def[")[0]
        inputs, outputs = section.split("following output(s):")
        assert "inputs['inputs'] tensor_info:" in inputs and "dtype: DT_STRING" in inputs
        assert "shape: (-1)" in inputs
        translations = outputs.split("outputs['translations']")[1].split("outputs['")[0]
        scores = outputs.split("outputs['scores']")[1].split("outputs['")[0]
        assert "DT_STRING" in translations and "DT_FLOAT" in scores


def test_export_uses_only_ops_stock_tf_serving_has(exported):
    _, path = exported
    ops = check_ops(path)
    assert {"SentencepieceOp", "SentencepieceTokenizeOp", "SentencepieceDetokenizeOp",
            "While", "TopKV2"} <= ops
    assert not any(op.startswith("Xla") for op in ops)


def test_op_check_rejects_slice_update(tmp_path):
    class SliceUpdate(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
        def __call__(self, x):
            return keras.ops.slice_update(x, [0, 1], tf.ones([1, 2]))

    tf.saved_model.save(SliceUpdate(), str(tmp_path / "bad"))
    assert "XlaDynamicUpdateSlice" in saved_model_ops(tmp_path / "bad")
    with pytest.raises(ExportError, match="XlaDynamicUpdateSlice"):
        check_ops(tmp_path / "bad")


def test_export_that_translates_differently_fails_and_leaves_no_version(
        translator, tmp_path, monkeypatch):
    import tfformer.export as export_module

    def wrong(path, sentences, **kwargs):
        return {"translations": ["x"] * len(sentences), "scores": [0.0] * len(sentences)}

    monkeypatch.setattr(export_module, "translate_in_fresh_process", wrong)
    with pytest.raises(ExportError, match="translates differently"):
        export_saved_model(translator, tmp_path, "tfformer", 1, check_sentences=["hola"])
    assert not os.path.exists(tmp_path / "tfformer" / "1")


def test_translator_takes_any_batch_with_one_trace(translator):
    one = translator.translate_texts(SENTENCES[:1])
    traces = translator.translate.experimental_get_tracing_count()
    outputs = translator.translate(tf.constant([], tf.string))
    assert outputs["translations"].shape == (0,) and outputs["scores"].dtype == tf.float32
    many = translator.translate_texts(SENTENCES)
    longer = translator.translate_texts([" ".join(SENTENCES * 3)] * 7)
    assert many[0][0] == one[0][0] and len(longer) == 7
    assert translator.translate.experimental_get_tracing_count() == traces


def test_greedy_translator_equals_beam_search_of_one_without_length_penalty(run_dir):
    # The Translator sends beam_size=1 to greedy_search; beam_search(k=1, alpha=0) is the same
    # search by another code path, through the same tokenizer.
    greedy = load_translator(run_dir, beam_size=1, max_output_extra=EXTRA)
    tokenizer = greedy.tokenizer
    source_ids = tokenizer.encode_source(tf.constant(SENTENCES)).to_tensor(default_value=0)
    beam = beam_search(greedy.model, source_ids, beam_size=1, alpha=0.0,
                       max_output_extra=greedy.max_output_extra)
    by_greedy_search = greedy_search(greedy.model, source_ids, greedy.max_output_extra)
    np.testing.assert_array_equal(beam.tokens[:, 0].numpy(), by_greedy_search.tokens[:, 0].numpy())
    beam_texts = [t.decode("utf-8") for t in tokenizer.detokenize(beam.tokens[:, 0]).numpy()]
    assert [text for text, _ in greedy.translate_texts(SENTENCES)] == beam_texts
    assert any(beam_texts)  # random weights still emit tokens: the comparison is not of blanks


def compat_python():
    """The second virtualenv (tensorflow 2.20.0 + tensorflow-text 2.20.0) that `make test`
    builds, standing in for the TF/TF Text versions a stock TF Serving binary links."""
    path = os.environ.get("TFFORMER_COMPAT_PYTHON",
                          os.path.join(ROOT, ".venv-tf2.20", "bin", "python"))
    if not os.path.exists(path):
        if os.environ.get("CI"):
            pytest.fail(f"{path} missing: `make test` builds it (target .venv-tf2.20)")
        pytest.skip(f"{path} missing: run `make test` to build the TF 2.20 compat venv")
    return path


def test_export_runs_unchanged_on_tensorflow_and_tf_text_2_20(exported, translator):
    _, path = exported
    python = compat_python()
    versions = subprocess.run(
        [python, "-c", "import tensorflow as tf, tensorflow_text as t; "
                       "print(tf.__version__, t.__version__)"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}).stdout.split()
    assert versions == ["2.20.0", "2.20.0"]
    got = translate_in_fresh_process(path, SENTENCES, python=python)
    assert got["translations"] == [text for text, _ in translator.translate_texts(SENTENCES)]


def test_op_allowlist_matches_tensorflow_2_20():
    python = compat_python()
    result = subprocess.run(
        [python, os.path.join(ROOT, "tools", "make_op_allowlist.py"), "--check",
         os.path.join(ROOT, "tfformer", "serving_ops.txt")],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 0, result.stderr[-2000:]


def test_grpc_round_trip_of_the_real_export_matches_in_process(exported, translator):
    base, _ = exported
    with server.start_server(os.path.join(base, "tfformer"), "tfformer") as handle:
        got = client.translate(SENTENCES, server=handle.address, timeout=60)
    expected = translator.translate_texts(SENTENCES)
    assert [t.text for t in got] == [text for text, _ in expected]
    np.testing.assert_allclose([t.score for t in got], [s for _, s in expected], atol=1e-4)


def test_export_program_picks_the_next_version(run_dir, tmp_path, capsys):
    command = [str(run_dir), "--model-base-path", str(tmp_path), "--beam-size", "1",
               "--max-output-extra", str(EXTRA)]
    assert export_main(command) == 0
    assert export_main(command) == 0
    assert sorted(os.listdir(tmp_path / "tfformer")) == ["1", "2"]
    reports = [json.loads(line) for line in capsys.readouterr().out.splitlines()
               if line.startswith("{")]
    assert [r["version"] for r in reports] == [1, 2]


def test_export_program_names_a_missing_run_file(tmp_path, caplog):
    assert export_main([str(tmp_path), "--model-base-path", str(tmp_path / "m")]) == 2  # input
    assert str(tmp_path) in caplog.text
