"""Translator and SavedModel export: the contract stock TF Serving relies on."""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from concurrent import futures

import grpc
import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.compat_python import compat_python
from tests.test_rest import call
from tfformer.cli.export import main as export_main
from tfformer.contract import (
    NBEST_SIGNATURE,
    SAMPLE_SIGNATURE,
    SIGNATURE_NAMES,
    read_saved_model,
)
from tfformer.decode.alignments import parse_pharaoh
from tfformer.decode.search import beam_search, greedy_search
from tfformer.decode.translator import load_translator
from tfformer.export.saved_model import (
    ExportError,
    check_calls,
    check_ops,
    export_saved_model,
    run_in_fresh_process,
    run_in_memory,
    saved_model_ops,
    translate_in_fresh_process,
)
from tfformer.serving import client, server

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


def nbest_in_memory(translator, sentences, k):
    """The in-memory Translator's translate_nbest: (texts [batch][k] as str, scores [batch, k])."""
    outputs = translator.translate_nbest(tf.constant(sentences, tf.string),
                                         tf.constant([k] * len(sentences)))
    return ([[t.decode("utf-8") for t in row] for row in outputs["translations"].numpy()],
            outputs["scores"].numpy())


@pytest.fixture(scope="module")
def exported_translator(run_dir):
    """The translator `exported` exports, loaded as tfformer-export loads one: it translates
    as `translator` does (the same run), and only the export calls it."""
    return load_translator(run_dir, max_output_extra=EXTRA)


# What `exported` saw of its fresh process: whether it ran at each in-memory check, and its exit.
FRESH_PROCESS_SEEN: dict[str, list] = {}


@pytest.fixture(scope="module")
def exported(exported_translator, tmp_path_factory):
    import tfformer.export.saved_model as export_module

    base = tmp_path_factory.mktemp("models")
    started, running = [], []
    start, in_memory = export_module.FreshProcess.__init__, export_module.run_in_memory

    def recorded_start(self, *args, **kwargs):
        start(self, *args, **kwargs)
        started.append(self)

    def recorded_in_memory(*args, **kwargs):
        running.append([fresh.process.poll() is None for fresh in started])
        return in_memory(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(export_module.FreshProcess, "__init__", recorded_start)
        patch.setattr(export_module, "run_in_memory", recorded_in_memory)
        path = export_saved_model(exported_translator, base, "tfformer", 1,
                                  check_sentences=SENTENCES)
    FRESH_PROCESS_SEEN.update(running=running,
                              exits=[fresh.process.returncode for fresh in started])
    return base, path


def test_export_writes_the_tf_serving_layout_and_nothing_else(exported):
    base, path = exported
    assert path == os.path.join(base, "tfformer", "1")
    assert {"assets", "saved_model.pb", "variables"} <= set(os.listdir(path))
    assert os.listdir(os.path.join(base, "tfformer")) == ["1"]  # no staging dir left


def test_the_fresh_process_imports_and_loads_the_export_while_the_in_memory_check_runs(
        exported):
    """The export starts its fresh process before it calls the in-memory Translator, so that
    the new process's TensorFlow import and SavedModel load (seconds) overlap those calls."""
    assert FRESH_PROCESS_SEEN == {"running": [[True], [True]], "exits": [0]}


def test_export_traces_each_search_once_for_the_save_and_its_checks(
        exported, exported_translator):
    """The save, the warmup and the in-memory check share one trace of each signature's
    function (`translate` answers two signatures): a search graph takes about a second to
    trace, and tf.saved_model.save would otherwise trace each one again."""
    functions = exported_translator.signature_functions()
    assert {name: function.experimental_get_tracing_count()
            for name, function in functions.items()} == dict.fromkeys(functions, 1)


def test_export_writes_warmup_requests_that_each_signature_runs(exported, translator):
    """TF Serving's warmup file, read here with TF Serving's own protos: a Predict request per
    signature on the first check sentences, each one its signature takes and runs."""
    from tensorflow_serving.apis import prediction_log_pb2

    _, path = exported
    records = tf.data.TFRecordDataset(
        os.path.join(path, "assets.extra", "tf_serving_warmup_requests")).as_numpy_iterator()
    logs = [prediction_log_pb2.PredictionLog.FromString(record) for record in records]
    assert [log.WhichOneof("log_type") for log in logs] == ["predict_log"] * len(logs)
    requests = [log.predict_log.request for log in logs]
    assert [r.model_spec.signature_name for r in requests] == list(SIGNATURE_NAMES)
    assert {r.model_spec.name for r in requests} == {"tfformer"}
    signature_defs = read_saved_model(path).meta_graphs[0].signature_def
    loaded = tf.saved_model.load(path)
    for request in requests:
        name = request.model_spec.signature_name
        wanted = signature_defs[name].inputs
        assert set(request.inputs) == set(wanted), name
        assert all(request.inputs[k].dtype == wanted[k].dtype for k in wanted), name
        inputs = {k: tf.constant(tf.make_ndarray(v)) for k, v in request.inputs.items()}
        sentences = [s.decode("utf-8") for s in inputs["inputs"].numpy()]
        assert sentences == SENTENCES[:2]
        outputs = loaded.signatures[name](**inputs)
        if name == "score":  # the sentences scored as their own translations
            assert [t.decode("utf-8") for t in inputs["targets"].numpy()] == SENTENCES[:2]
            want = translator.score_texts(SENTENCES[:2], SENTENCES[:2])
            np.testing.assert_allclose(outputs["scores"].numpy(), [w[0] for w in want],
                                       atol=1e-5)
            continue
        texts = [t.decode("utf-8") for t in outputs["translations"].numpy().ravel()]
        if name == NBEST_SIGNATURE:  # the largest k the export takes
            assert inputs["k"].numpy().tolist() == [translator.beam_size] * 2
            assert outputs["translations"].shape == (2, translator.beam_size)
        elif name == SAMPLE_SIGNATURE:
            assert texts == [t.decode("utf-8") for t in translator.translate_sample(
                *[inputs[key] for key in ("inputs", "temperature", "top_k", "top_p", "seed")]
            )["translations"].numpy()]
        else:  # the best hypothesis; translate_prefix with empty prefixes
            assert texts == [text for text, _ in translator.translate_texts(sentences)]


def test_fresh_process_reload_reproduces_translations(exported, translator):
    _, path = exported
    expected = translator.translate_texts(SENTENCES)
    got = translate_in_fresh_process(path, SENTENCES, k=translator.beam_size)
    assert got["modules"] == []  # tfformer was not imported: the export stands alone
    assert got["translations"] == [text for text, _ in expected]
    np.testing.assert_allclose(got["scores"], [score for _, score in expected], atol=1e-4)
    assert len(set(got["translations"])) > 2  # different inputs, different outputs
    nbest_texts, nbest_scores = nbest_in_memory(translator, SENTENCES, translator.beam_size)
    assert got["nbest_translations"] == nbest_texts
    np.testing.assert_allclose(got["nbest_scores"], nbest_scores, atol=1e-4)


def assert_same_answers(got, expected):
    for signature, outputs in expected.items():
        assert got[signature]["translations"] == outputs["translations"], signature
        np.testing.assert_allclose(got[signature]["scores"], outputs["scores"], atol=1e-4)
        if "alignments" in outputs:
            assert got[signature]["alignments"] == outputs["alignments"], signature


def every_signature_calls(translator):
    """check_calls with prefixes from the translations and mixed sampling settings."""
    calls = check_calls(SENTENCES, translator.beam_size,
                        [text.split(" ")[0][:translator.max_prefix_pieces // 2]
                         for text, _ in translator.translate_texts(SENTENCES)])
    calls["translate_nbest"]["k"] = [1, 4, 2, 3, 1]
    calls["translate_sample"].update(temperature=[1.0, 0.5, 2.0, 1.0, 1.0],
                                     top_k=[0, 3, 0, 1, 0], top_p=[1.0, 1.0, 0.7, 1.0, 0.9],
                                     seed=[0, 1, 2**40, 3, 17])
    # Their answers are no list of translations: their own tests (below; tests/test_documents.py).
    del calls["score"], calls["translate_document"]
    return calls


def test_fresh_process_gives_every_signatures_answers(exported, translator):
    """The same seed, the same sample; prefixes and per-sentence k alike, in a process that
    imports tensorflow and tensorflow_text only."""
    _, path = exported
    calls = every_signature_calls(translator)
    got = run_in_fresh_process(path, calls)
    assert got["modules"] == []
    assert got["translate_nbest"]["shape/translations"] == [len(SENTENCES), 4]
    assert_same_answers(got, run_in_memory(translator, calls))


def test_saved_model_cli_shows_string_in_string_out_signatures(exported):
    _, path = exported
    cli = shutil.which("saved_model_cli", path=os.path.dirname(sys.executable))
    result = subprocess.run([cli, "show", "--dir", path, "--all"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    for name, shape in (("serving_default", "(-1)"), ("translate", "(-1)"),
                        ("translate_nbest", "(-1, -1)"), ("translate_sample", "(-1)"),
                        ("translate_prefix", "(-1)")):
        section = result.stdout.split(f"signature_def['{name}']:")[1].split("signature_def[")[0]
        inputs, outputs = section.split("following output(s):")
        text_input = inputs.split("inputs['inputs']")[1].split("inputs['")[0]
        assert "dtype: DT_STRING" in text_input and "shape: (-1)" in text_input
        translations = outputs.split("outputs['translations']")[1].split("outputs['")[0]
        scores = outputs.split("outputs['scores']")[1].split("outputs['")[0]
        assert "DT_STRING" in translations and "DT_FLOAT" in scores
        assert f"shape: {shape}" in translations and f"shape: {shape}" in scores
        if name == "translate_nbest":
            k = inputs.split("inputs['k']")[1]
            assert "dtype: DT_INT32" in k and "shape: (-1)" in k
        else:
            assert "inputs['k']" not in inputs


def test_export_uses_only_ops_stock_tf_serving_has(exported):
    _, path = exported
    ops = check_ops(path)
    assert {"SentencepieceOp", "SentencepieceTokenizeOp", "SentencepieceDetokenizeOp",
            "While", "TopKV2", "Assert"} <= ops  # Assert: translate_nbest's check of k
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
    import tfformer.export.saved_model as export_module

    started = []

    def wrong(self, calls, *args):  # every signature right but the sample
        started.append(self)
        answers = run_in_memory(translator, calls)
        answers[SAMPLE_SIGNATURE]["translations"] = ["x"]
        return answers

    monkeypatch.setattr(export_module.FreshProcess, "answers", wrong)
    with pytest.raises(ExportError, match=r"translates differently .*\(translate_sample\)"):
        export_saved_model(translator, tmp_path, "tfformer", 1, check_sentences=["hola"])
    assert not os.path.exists(tmp_path / "tfformer" / "1")
    # The fresh process it never asked was killed, not left behind.
    assert [fresh.process.returncode for fresh in started] == [-signal.SIGKILL]


def test_nbest_signature_is_the_beam_best_first_and_refuses_a_k_outside_it(exported, translator):
    _, path = exported
    loaded = client.load_saved_model(path)
    beam = translator.beam_size
    assert beam == 4  # the default search: k = 1..4
    inputs = tf.constant(SENTENCES)
    best = loaded.signatures["translate"](inputs=inputs)
    # An independent reference: beam_search's whole n-best list, run eagerly.
    tokenizer = translator.tokenizer
    reference = beam_search(translator.model,
                            tokenizer.encode_source(inputs).to_tensor(default_value=0), beam,
                            translator.length_penalty, translator.max_output_extra, n_best=beam)
    reference_texts = np.stack([tokenizer.detokenize(reference.tokens[:, j]).numpy()
                                for j in range(beam)], axis=1)
    for k in range(1, beam + 1):
        outputs = loaded.signatures["translate_nbest"](inputs=inputs,
                                                       k=tf.fill([len(SENTENCES)], k))
        texts, scores = outputs["translations"].numpy(), outputs["scores"].numpy()
        assert texts.shape == scores.shape == (len(SENTENCES), k)
        assert texts[:, 0].tolist() == best["translations"].numpy().tolist()
        np.testing.assert_allclose(scores[:, 0], best["scores"].numpy(), rtol=1e-6)
        assert (np.diff(scores, axis=1) <= 0).all(), scores  # best first
        assert texts.tolist() == reference_texts[:, :k].tolist()
        np.testing.assert_allclose(scores, reference.scores[:, :k].numpy(), atol=1e-4)
    assert any(len(set(row)) > 1 for row in texts.tolist())  # hypotheses, not copies of one
    assert (scores > -1e8).all()  # every one a finished hypothesis
    # k per sentence: each row has its own k columns, then "" and -inf up to the largest k
    ks = [1, 4, 2, 3, 1]
    outputs = loaded.signatures["translate_nbest"](inputs=inputs, k=tf.constant(ks))
    texts, scores = outputs["translations"].numpy(), outputs["scores"].numpy()
    assert texts.shape == (len(SENTENCES), 4)
    for row, k in enumerate(ks):
        assert texts[row, :k].tolist() == reference_texts[row, :k].tolist()
        assert texts[row, k:].tolist() == [b""] * (4 - k)
        assert np.isneginf(scores[row, k:]).all() and np.isfinite(scores[row, :k]).all()
    for k in (0, -1, beam + 1):
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=rf"k must be between 1 and the beam size \(4\), got\] "
                                 rf"\[1 {k} 1 1 1\]"):
            loaded.signatures["translate_nbest"](inputs=inputs, k=tf.constant([1, k, 1, 1, 1]))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"k must have one value per sentence: inputs has\] \[5\] "
                             r"\[values and k has\] \[2\]"):
        loaded.signatures["translate_nbest"](inputs=inputs, k=tf.constant([1, 2]))


def test_every_input_and_output_of_every_signature_has_the_batch_first(exported):
    """TF Serving's batching merges requests on dimension 0 and refuses a tensor without one
    (ComputeTensorBatchSize in tensorflow_serving/batching/batching_util.h)."""
    _, path = exported
    signature_defs = read_saved_model(path).meta_graphs[0].signature_def
    assert set(SIGNATURE_NAMES) <= set(signature_defs)
    for name in SIGNATURE_NAMES:
        for kind, tensors in (("input", signature_defs[name].inputs),
                              ("output", signature_defs[name].outputs)):
            for alias, info in tensors.items():
                dims = [d.size for d in info.tensor_shape.dim]
                assert len(dims) >= 1 and dims[0] == -1, (name, kind, alias, dims)


def test_one_call_in_process_takes_every_signature_and_its_inputs(exported, translator):
    """translate_saved_model(sentences, model, signature, **inputs) answers as the in-memory
    Translator for every signature (n-best: k per sentence, best first)."""
    _, path = exported
    calls = every_signature_calls(translator)
    expected = run_in_memory(translator, calls)
    loaded = client.load_saved_model(path)
    for signature, inputs in calls.items():
        got = client.translate_saved_model(
            SENTENCES, loaded, signature, batch_size=2,
            **{name: values for name, values in inputs.items() if name != "inputs"})
        if signature == "translate_nbest":
            texts = [text for row, k in zip(np.reshape(expected[signature]["translations"],
                                                       (len(SENTENCES), -1)), inputs["k"])
                     for text in row[:k]]
            assert [t.text for row in got for t in row] == texts
            assert [len(row) for row in got] == inputs["k"]
            continue
        assert [t.text for t in got] == expected[signature]["translations"], signature
        np.testing.assert_allclose([t.score for t in got], expected[signature]["scores"],
                                   atol=1e-4)
        if "alignments" in expected[signature]:
            assert [t.alignment for t in got] == expected[signature]["alignments"]


def test_sample_and_prefix_signatures_keep_their_promises(exported, translator):
    _, path = exported
    loaded = client.load_saved_model(path)
    sentences = SENTENCES[:3]
    best = [text for text, _ in translator.translate_texts(sentences)]

    def sample(**values):
        settings = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "seed": 0, **values}
        return client.translate_saved_model_sample(sentences * 4, loaded, **settings)

    one = sample(seed=list(range(12)))
    assert [t.text for t in sample(seed=list(range(12)))] == [t.text for t in one]
    assert len({t.text for t in one}) > 4  # seeds differ: samples differ
    assert [t.text for t in sample(top_k=1, seed=list(range(12)))] == \
        [t.text for t in client.translate_saved_model(
            sentences * 4, client.load_saved_model(path), "translate_sample", top_k=1, seed=7)]
    with pytest.warns(DeprecationWarning, match="give the signature's inputs as keywords"):
        legacy = client.translate_saved_model(
            sentences * 4, loaded, "translate_sample",
            inputs={"temperature": 1.0, "top_k": 1, "top_p": 1.0, "seed": 7})
    assert [t.text for t in legacy] == [t.text for t in sample(top_k=1, seed=7)]
    for bad, message in (({"temperature": 0.0}, r"temperature must be a number above 0"),
                         ({"temperature": float("nan")}, r"temperature must be a number"),
                         ({"top_k": -1}, r"top_k must be 0 \(off\) or more"),
                         ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
                         ({"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
                         ({"seed": -3}, r"seed must be 0 or more")):
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            sample(**bad)

    # A prefix: the translation starts with it; an empty one is the search without one.
    prefixes = [best[1].split(" ")[0], "", best[0].split(" ")[0] + " " + best[2].split(" ")[0]]
    got = client.translate_saved_model_prefix(sentences, prefixes, loaded)
    for prefix, translation, alone in zip(prefixes, got, best):
        assert translation.text.startswith(prefix)
        if not prefix:
            assert translation.text == alone
    assert got[0].text != best[0]  # forced to start otherwise, it continues otherwise
    limit = translator.max_prefix_pieces
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=rf"prefixes must each be at most {limit} pieces long"):
        client.translate_saved_model_prefix(sentences[:1], "la " * (limit + 1), loaded)


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
    # The Translator sends beam_size=1 to greedy_search; beam_search(k=1, length_penalty=0) is
    # the same search by another code path, through the same tokenizer.
    greedy = load_translator(run_dir, beam_size=1, max_output_extra=EXTRA)
    tokenizer = greedy.tokenizer
    source_ids = tokenizer.encode_source(tf.constant(SENTENCES)).to_tensor(default_value=0)
    beam = beam_search(greedy.model, source_ids, beam_size=1, length_penalty=0.0,
                       max_output_extra=greedy.max_output_extra)
    by_greedy_search = greedy_search(greedy.model, source_ids, greedy.max_output_extra)
    np.testing.assert_array_equal(beam.tokens[:, 0].numpy(), by_greedy_search.tokens[:, 0].numpy())
    beam_texts = [t.decode("utf-8") for t in tokenizer.detokenize(beam.tokens[:, 0]).numpy()]
    assert [text for text, _ in greedy.translate_texts(SENTENCES)] == beam_texts
    assert any(beam_texts)  # random weights still emit tokens: the comparison is not of blanks


@pytest.fixture(scope="module")
def bf16_translator(run_dir):
    return load_translator(run_dir, max_output_extra=EXTRA, precision="bf16")


@pytest.fixture(scope="module")
def exported_bf16(run_dir, tmp_path_factory):
    """tfformer-export --precision bf16 of the run: (model base path, version dir, report)."""
    base = tmp_path_factory.mktemp("models_bf16")
    sentences = base / "check.txt"
    sentences.write_text("".join(f"{s}\n" for s in SENTENCES))
    out = base / "report.json"
    with open(out, "w") as stdout, contextlib.redirect_stdout(stdout):
        assert export_main([str(run_dir), "--model-base-path", str(base), "--precision", "bf16",
                            "--max-output-extra", str(EXTRA),
                            "--check-sentences", str(sentences)]) == 0
    report = json.loads(out.read_text())
    return base, report["export_dir"], report


def op_dtypes(export_dir) -> dict[str, set[str]]:
    """{op type: the dtypes its "T" attribute takes} over the SavedModel's functions."""
    found = {}
    for meta_graph in read_saved_model(export_dir).meta_graphs:
        for function in meta_graph.graph_def.library.function:
            for node in function.node_def:
                if node.attr["T"].type:
                    found.setdefault(node.op, set()).add(tf.as_dtype(node.attr["T"].type).name)
    return found


def test_bf16_export_stores_and_multiplies_in_bf16_and_keeps_norms_and_scores_in_float32(
        exported_bf16, translator, bf16_translator):
    _, path, report = exported_bf16  # checked: stock TF Serving's ops, in a fresh process
    assert report["precision"] == "bf16" and report["version"] == 1
    stored = tf.train.load_checkpoint(os.path.join(path, "variables", "variables"))
    dtypes = stored.get_variable_to_dtype_map().values()
    assert {d.name for d in dtypes if d.is_floating} == {"bfloat16"}
    ops = op_dtypes(path)
    assert ops["MatMul"] == ops["BatchMatMulV2"] == {"bfloat16"}  # every matmul
    # The attention softmax, LayerNorm's moments and rsqrt, the log-softmax and the top-k over
    # beam scores: float32 only.
    for op in ("Softmax", "Mean", "SquaredDifference", "Rsqrt", "LogSoftmax", "TopKV2"):
        assert ops[op] - {"int32"} == {"float32"}, op  # int32: beams kept in rank order

    # Each weight is the float32 weight rounded to the nearest bfloat16 (TensorFlow's cast).
    for ours, full in zip(bf16_translator.model.weights, translator.model.weights, strict=True):
        assert ours.dtype == "bfloat16" and ours.path == full.path
        rounded = tf.cast(tf.cast(full.value, tf.bfloat16), tf.float32)
        np.testing.assert_array_equal(tf.cast(ours.value, tf.float32).numpy(), rounded.numpy())
    # The logits stay float32, within bfloat16's precision (8 bits) of the float32 model's.
    ids = np.random.default_rng(0).integers(4, translator.model.transformer_config.vocab_size,
                                            size=(3, 9)).astype("int32")
    full_logits = translator.model((ids, ids), training=False)
    bf16_logits = bf16_translator.model((ids, ids), training=False)
    assert bf16_logits.dtype == tf.float32
    scale = float(tf.reduce_max(tf.abs(full_logits)))
    error = float(tf.reduce_max(tf.abs(bf16_logits - full_logits)))
    assert 0 < error < 0.05 * scale, (error, scale)


def test_export_program_refuses_an_unknown_precision(run_dir, capsys):
    with pytest.raises(SystemExit) as usage:
        export_main([str(run_dir), "--precision", "fp16"])
    assert usage.value.code == 2 and "invalid choice: 'fp16'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="precision must be one of fp32, bf16, got 'int8'"):
        load_translator(run_dir, precision="int8")
    with pytest.raises(SystemExit) as usage:
        export_main([str(run_dir), "--format", "ctranslate2", "--out", "x", "--precision", "bf16"])
    assert "--format ctranslate2 does not take --precision" in capsys.readouterr().err


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_export_runs_unchanged_on_tensorflow_and_tf_text_2_20(precision, request):
    path = request.getfixturevalue("exported" if precision == "fp32" else "exported_bf16")[1]
    translator = request.getfixturevalue(
        "translator" if precision == "fp32" else "bf16_translator")
    calls = every_signature_calls(translator)
    got = run_in_fresh_process(path, calls, python=compat_python())
    assert got["versions"] == {"tensorflow": "2.20.0", "tensorflow_text": "2.20.0"}
    assert_same_answers(got, run_in_memory(translator, calls))


def test_op_allowlist_matches_tensorflow_2_20():
    python = compat_python()
    result = subprocess.run(
        [python, os.path.join(ROOT, "tools", "make_op_allowlist.py"), "--check",
         os.path.join(ROOT, "tfformer", "export", "serving_ops.txt")],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 0, result.stderr[-2000:]


def test_grpc_and_rest_round_trips_of_the_real_export_match_in_process(exported, translator):
    """Every signature over gRPC, REST's row format and REST's columnar format gives the
    in-memory Translator's answers; bad values are INVALID_ARGUMENT / 400 naming the input."""
    base, _ = exported
    beam = translator.beam_size
    predict = "/v1/models/tfformer:predict"
    calls = every_signature_calls(translator)
    expected = run_in_memory(translator, calls)
    n = len(SENTENCES)
    with server.start_server(os.path.join(base, "tfformer"), "tfformer",
                             rest_api_port=0) as handle:
        address = handle.address
        # One client call for every signature, its inputs by name.
        grpc_answers = {
            signature: client.translate(SENTENCES, server=address, signature=signature,
                                        timeout=60, **{name: values for name, values in
                                                       inputs.items() if name != "inputs"})
            for signature, inputs in calls.items() if signature != "translate_nbest"}
        nbest = client.translate(SENTENCES, server=address, signature="translate_nbest", k=beam,
                                 timeout=60)
        # The calls of each signature before it, kept for a release, and the defaults (sampling
        # off) that a left-out input takes.
        assert client.translate_prefix(SENTENCES, calls["translate_prefix"]["prefixes"],
                                       server=address, timeout=60) == \
            grpc_answers["translate_prefix"]
        assert client.translate_sample(SENTENCES, seed=3, server=address, timeout=60) == \
            client.translate(SENTENCES, server=address, signature="translate_sample", seed=3,
                             temperature=1.0, top_k=0, top_p=1.0, timeout=60)
        with pytest.raises(ValueError, match="translate_nbest needs k"):
            client.translate(SENTENCES, server=address, signature="translate_nbest")
        with pytest.raises(ValueError, match="translate_sample takes temperature, top_k, top_p, "
                                             "seed besides inputs, not beam"):
            client.translate(SENTENCES, server=address, signature="translate_sample", beam=2)
        rows, columns = {}, {}
        for signature, inputs in calls.items():
            rows[signature] = call(handle.rest_address, predict, {
                "signature_name": signature,
                "instances": [{name: values[i] for name, values in inputs.items()}
                              for i in range(n)]})
            columns[signature] = call(handle.rest_address, predict, {
                "signature_name": signature, "inputs": inputs})
        with pytest.raises(client.TranslationError) as over_beam:
            client.translate_nbest(SENTENCES[:1], beam + 1, server=address, timeout=60)
        with pytest.raises(client.TranslationError) as negative_seed:
            client.translate_sample(SENTENCES[:2], seed=[1, -1], server=address, timeout=60)
        refused = [call(handle.rest_address, predict, {"signature_name": signature,
                                                       "instances": [instance]})
                   for signature, instance in (
                       ("translate_nbest", {"inputs": "hola", "k": 0}),
                       ("translate_sample", {"inputs": "hola", "temperature": 1.0, "top_k": 0,
                                             "top_p": 1.5, "seed": 0}),
                       ("translate_prefix", {"inputs": "hola", "prefixes": "a " * 300}))]
        after = client.translate(SENTENCES[:1], server=address, timeout=60)

    for signature, translations in grpc_answers.items():
        assert [t.text for t in translations] == expected[signature]["translations"], signature
        assert [t.alignment for t in translations] == expected[signature].get(
            "alignments", [None] * len(SENTENCES)), signature
        np.testing.assert_allclose([t.score for t in translations],
                                   expected[signature]["scores"], atol=1e-4)
    want_texts, want_scores = nbest_in_memory(translator, SENTENCES, beam)
    assert [[t.text for t in row] for row in nbest] == want_texts
    np.testing.assert_allclose([[t.score for t in row] for row in nbest], want_scores, atol=1e-4)
    for signature, answer in expected.items():
        status, rest_rows = rows[signature]
        assert status == 200, rest_rows
        texts = [row["translations"] for row in rest_rows["predictions"]]
        assert np.ravel(np.array(texts, dtype=object)).tolist() == answer["translations"]
        status, rest_columns = columns[signature]
        assert status == 200, rest_columns
        assert np.ravel(np.array(rest_columns["outputs"]["translations"], dtype=object)
                        ).tolist() == answer["translations"]
        scores = np.ravel(np.array(rest_columns["outputs"]["scores"], dtype=float))
        np.testing.assert_allclose(scores, answer["scores"], atol=1e-4)
        if "alignments" in answer:
            assert [row["alignments"] for row in rest_rows["predictions"]] == \
                rest_columns["outputs"]["alignments"] == answer["alignments"]
    assert over_beam.value.code == negative_seed.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "k must be between 1 and the beam size (4), got] [5]" in over_beam.value.details
    assert "seed must be 0 or more, got] [1 -1]" in negative_seed.value.details
    for (status, body), named in zip(refused, ("k must be between 1", "top_p must be in (0, 1]",
                                               "prefixes must each be at most")):
        assert status == 400 and named in body["error"], body
    assert [t.text for t in after] == [grpc_answers["serving_default"][0].text]  # serving on


def test_export_program_picks_the_next_version_and_a_greedy_export_has_1_best(
        run_dir, tmp_path, capsys):
    command = [str(run_dir), "--model-base-path", str(tmp_path), "--beam-size", "1",
               "--max-output-extra", str(EXTRA)]
    (tmp_path / "tfformer" / "1").mkdir(parents=True)  # a version TF Serving already has
    assert export_main(command) == 0
    assert sorted(os.listdir(tmp_path / "tfformer")) == ["1", "2"]
    reports = [json.loads(line) for line in capsys.readouterr().out.splitlines()
               if line.startswith("{")]
    assert [r["version"] for r in reports] == [2]

    # --beam-size 1: translate_nbest is there, with k = 1 only.
    greedy = client.load_saved_model(str(tmp_path / "tfformer" / "2"))
    inputs = tf.constant(SENTENCES)
    best = greedy.signatures["serving_default"](inputs=inputs)
    one = greedy.signatures["translate_nbest"](inputs=inputs, k=tf.ones([len(SENTENCES)], tf.int32))
    assert one["translations"].shape == one["scores"].shape == (len(SENTENCES), 1)
    assert one["translations"].numpy()[:, 0].tolist() == best["translations"].numpy().tolist()
    np.testing.assert_allclose(one["scores"].numpy()[:, 0], best["scores"].numpy(), rtol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"beam size \(1\), got\] \[2 1 1"):
        greedy.signatures["translate_nbest"](inputs=inputs, k=tf.constant([2, 1, 1, 1, 1]))


def test_export_program_names_a_missing_run_file(tmp_path, caplog):
    assert export_main([str(tmp_path), "--model-base-path", str(tmp_path / "m")]) == 2  # input
    assert str(tmp_path) in caplog.text


def test_export_program_refuses_version_0_instead_of_taking_the_next(run_dir, tmp_path, caplog):
    assert export_main([str(run_dir), "--model-base-path", str(tmp_path), "--version", "0"]) == 2
    assert "version must be a positive integer, got 0" in caplog.text
    assert not os.path.exists(tmp_path / "tfformer")


def repeated_bigrams(row):
    tokens = [int(t) for t in row]
    tokens = tokens[:tokens.index(3)] if 3 in tokens else tokens  # up to EOS
    grams = list(zip(tokens, tokens[1:]))
    return len(grams) - len(set(grams))


def test_export_program_no_repeat_ngram_forbids_repeats_in_every_signature(
        run_dir, translator, tmp_path, caplog):
    guarded = load_translator(run_dir, max_output_extra=EXTRA, no_repeat_ngram=2)
    source_ids = translator.tokenizer.encode_source(tf.constant(SENTENCES)).to_tensor()
    free = translator.search(source_ids, n_best=4).tokens.numpy()
    assert sum(repeated_bigrams(row) for beam in free for row in beam) > 0  # random weights
    tokens = guarded.search(source_ids, n_best=4).tokens.numpy()
    assert sum(repeated_bigrams(row) for beam in tokens for row in beam) == 0
    sampled = guarded.translate_sample(tf.constant(SENTENCES * 4), tf.fill([20], 1.5),
                                       tf.zeros([20], tf.int32), tf.ones([20]),
                                       tf.range(20, dtype=tf.int64))
    assert len(set(sampled["translations"].numpy().tolist())) > 5

    assert export_main([str(run_dir), "--model-base-path", str(tmp_path), "--no-repeat-ngram",
                        "2", "--max-output-extra", str(EXTRA)]) == 0  # checked in a fresh process
    loaded = client.load_saved_model(str(tmp_path / "tfformer" / "1"))
    assert [t.text for t in client.translate_saved_model(SENTENCES, loaded)] == \
        [text for text, _ in guarded.translate_texts(SENTENCES)]
    assert [t.text for t in client.translate_saved_model(SENTENCES, loaded)] != \
        [text for text, _ in translator.translate_texts(SENTENCES)]
    assert export_main([str(run_dir), "--model-base-path", str(tmp_path),
                        "--no-repeat-ngram", "-1"]) == 2
    assert "no_repeat_ngram must be >= 0, got -1" in caplog.text


def test_translate_program_samples_and_continues_prefixes(exported, translator, capsys):
    from tfformer.cli import translate as translate_cli

    base, _ = exported
    where = ["--saved-model", str(base / "tfformer")]
    sentences = SENTENCES[:3]
    runs = []
    for seed in ("7", "7", "8"):
        assert translate_cli.main([*where, "--sample", "--seed", seed, "--temperature", "1.5",
                                   *sentences]) == 0
        runs.append(capsys.readouterr().out)
    assert runs[0] == runs[1] and runs[0] != runs[2]
    want = translator.translate_sample(
        tf.constant(sentences), tf.fill([3], 1.5), tf.zeros([3], tf.int32), tf.ones([3]),
        tf.fill([3], tf.constant(7, tf.int64)))["translations"].numpy()
    assert runs[0].splitlines() == [t.decode("utf-8") for t in want]

    prefix = translator.translate_texts(sentences[1:2])[0][0].split(" ")[0]
    assert translate_cli.main([*where, "--prefix", prefix, "--scores", *sentences]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all(line.split("\t")[1].startswith(prefix) for line in lines)

    assert translate_cli.main([*where, "--sample", "--top-p", "1.5", "hola"]) == 2
    assert "INVALID_ARGUMENT: assertion failed: [translate_sample: top_p must be in (0, 1]" \
        in capsys.readouterr().err
    for flags, message in ((["--sample", "--nbest", "2"], "--nbest and --sample call different"),
                           (["--top-k", "5"], "--top-k need --sample")):
        with pytest.raises(SystemExit) as usage:
            translate_cli.main([*where, *flags, "hola"])
        assert usage.value.code == 2 and message in capsys.readouterr().err


def test_align_signature_is_translate_with_the_last_layers_attention_argmax(
        exported, translator, capsys):
    """translate_align: translate's answers, and for each target piece the source piece of
    largest weight in the last layer's cross-attention averaged over heads (NumPy, on
    attention_maps' weights of each sentence alone), in memory and from tfformer-translate."""
    from tfformer.cli import translate as translate_cli
    from tfformer.decode.attention_maps import attention_maps

    inputs = tf.constant(SENTENCES)
    aligned, best = translator.translate_align(inputs), translator.translate(inputs)
    for name in ("translations", "scores"):
        np.testing.assert_array_equal(aligned[name].numpy(), best[name].numpy())
    texts = [a.decode("utf-8") for a in aligned["alignments"].numpy()]
    for sentence, text in zip(SENTENCES, texts):
        maps = attention_maps(translator, sentence)
        last = maps.weights["decoder_cross"][-1].mean(axis=0)[:-1, :-1]  # EOS left out
        want = [] if last.shape[1] == 0 else list(enumerate(last.argmax(axis=-1)))
        assert [(j, i) for i, j in parse_pharaoh(text)] == want, (sentence, text)
    assert texts[3] == ""  # an empty sentence: a source of EOS alone

    base, _ = exported
    assert translate_cli.main(["--saved-model", str(base / "tfformer"), "--alignments",
                               *SENTENCES]) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    translations = [t.decode("utf-8") for t in best["translations"].numpy()]
    assert lines == [[t, a] for t, a in zip(translations, texts)]
    with pytest.raises(SystemExit) as usage:
        translate_cli.main(["--saved-model", str(base / "tfformer"), "--alignments",
                            "--nbest", "2", "hola"])
    assert usage.value.code == 2
    assert "--nbest and --alignments call different" in capsys.readouterr().err


def merged_calls(calls, sentence_index, others):
    """`calls` for sentence `sentence_index` alone, and merged (first) with the sentences
    `others`, as request batching concatenates requests."""
    alone, merged = {}, {}
    for signature, inputs in calls.items():
        alone[signature] = {name: values[sentence_index:sentence_index + 1]
                            for name, values in inputs.items()}
        merged[signature] = {name: values[sentence_index:sentence_index + 1]
                             + [values[i] for i in others] for name, values in inputs.items()}
    return alone, merged


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_a_sentence_translates_the_same_alone_and_merged_with_longer_ones(
        search, run_dir, translator):
    if search == "greedy":
        translator = load_translator(run_dir, beam_size=1, max_output_extra=EXTRA)
    calls = every_signature_calls(translator)
    if search == "greedy":
        calls["translate_nbest"]["k"] = [1] * len(SENTENCES)
    longer = [0, 1]  # the two longest sentences
    for short in (2, 4):
        alone, merged = merged_calls(calls, short, longer)
        alone, merged = run_in_memory(translator, alone), run_in_memory(translator, merged)
        for signature, outputs in alone.items():
            width = len(outputs["translations"])  # its row of the merged batch
            if signature == "translate_nbest":  # the merged rows are as wide as their largest k
                width_merged = len(merged[signature]["translations"]) // (1 + len(longer))
                cut = lambda values: values[:width_merged][:width]  # noqa: E731
            else:
                cut = lambda values: values[:width]  # noqa: E731
            assert cut(merged[signature]["translations"]) == outputs["translations"], signature
            if "alignments" in outputs:  # padded source positions get no weight
                assert cut(merged[signature]["alignments"]) == outputs["alignments"]
            np.testing.assert_allclose(cut(merged[signature]["scores"]), outputs["scores"],
                                       atol=1e-5)


def test_the_server_merges_every_signature_of_the_real_export(exported, translator):
    from tfformer.serving.batching import BatchingParameters

    base, _ = exported
    calls = every_signature_calls(translator)
    expected = {signature: run_in_memory(translator, {signature: {
        name: values[:1] for name, values in inputs.items()}})[signature]
        for signature, inputs in calls.items()}  # sentence 0 alone
    batching = BatchingParameters(max_batch_size=16, batch_timeout_micros=500_000,
                                  num_batch_threads=1)
    with server.start_server(os.path.join(base, "tfformer"), "tfformer", workers=16,
                             poll_seconds=0, batching=batching) as handle:
        def one(signature_and_index):
            signature, index = signature_and_index
            inputs = {name: values[index:index + 1]
                      for name, values in calls[signature].items()}
            sentences = inputs.pop("inputs")
            request = client.make_predict_request(sentences, signature=signature,
                                                  inputs=inputs)
            with grpc.insecure_channel(handle.address) as channel:
                response = client.prediction_service_pb2_grpc.PredictionServiceStub(
                    channel).Predict(request, timeout=120)
            return client.make_ndarray(response.outputs["translations"]).tolist()

        jobs = [(signature, i) for signature in calls for i in (0, 0, 1)]
        with futures.ThreadPoolExecutor(len(jobs)) as pool:
            answers = list(pool.map(one, jobs))
        tasks, batches = handle.batcher.tasks_run, handle.batcher.batches_run
    assert tasks == len(jobs) and batches < tasks
    for (signature, index), answer in zip(jobs, answers):
        if index == 0:
            texts = [t.decode("utf-8") for t in np.ravel(answer)]
            want = expected[signature]["translations"]
            assert texts[:len(want)] == want, signature


def score_pairs(translator):
    """SENTENCES with their translations, then with other targets: an empty one, one long."""
    translations = [text for text, _ in translator.translate_texts(SENTENCES)]
    others = ["", "the three red dogs eat green apples", "where", "a b c", "hola"]
    return SENTENCES * 2, translations + others


def assert_same_scores(got, expected, atol=1e-4):
    """client.Score lists (or (score, normalized, token scores) tuples) alike."""
    got, expected = ([tuple(x) if isinstance(x, tuple) else (x.score, x.normalized,
                                                              x.token_scores) for x in values]
                     for values in (got, expected))
    assert [len(g[2]) for g in got] == [len(e[2]) for e in expected]
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g[:2], e[:2], atol=atol)
        np.testing.assert_allclose(g[2], e[2], atol=atol)


def test_score_signature_answers_alike_in_a_fresh_process_in_process_and_served(
        exported, translator):
    """`score` of the export, in a process with tensorflow and tensorflow_text only, through
    translate_saved_model, over gRPC (also merged by request batching) and REST, gives the
    in-memory Translator's scores; a bad value is INVALID_ARGUMENT / 400 naming `targets`."""
    from tfformer.serving.batching import BatchingParameters

    base, path = exported
    sources, targets = score_pairs(translator)
    expected = translator.score_texts(sources, targets)
    assert [len(e[2]) for e in expected[-5:]] == [
        len(translator.tokenizer.pieces.encode([t])[0]) + 1 for t in targets[-5:]]
    fresh = run_in_fresh_process(path, {"score": {"inputs": sources, "targets": targets}})
    width = max(len(e[2]) for e in expected)
    assert fresh["score"]["shape/token_scores"] == [len(sources), width]
    rows = np.reshape(fresh["score"]["token_scores"], (len(sources), width))
    assert_same_scores([(s, n, row[:length]) for s, n, row, length in zip(
        fresh["score"]["scores"], fresh["score"]["normalized_scores"], rows,
        fresh["score"]["lengths"])], expected)
    assert_same_scores(client.translate_saved_model(sources, client.load_saved_model(path),
                                                    "score", batch_size=3, targets=targets),
                       expected)
    predict = "/v1/models/tfformer:predict"
    batching = BatchingParameters(max_batch_size=16, batch_timeout_micros=300_000,
                                  num_batch_threads=1)
    with server.start_server(os.path.join(base, "tfformer"), "tfformer", rest_api_port=0,
                             workers=8, poll_seconds=0, batching=batching) as handle:
        over_grpc = client.translate(sources, server=handle.address, signature="score",
                                     targets=targets, timeout=60)

        def one(index):  # one pair a request: the batcher merges targets of other lengths
            return client.translate(sources[index:index + 1], server=handle.address,
                                    signature="score", targets=targets[index:index + 1],
                                    timeout=120)[0]

        with futures.ThreadPoolExecutor(len(sources)) as pool:
            merged = list(pool.map(one, range(len(sources))))
        tasks, batches = handle.batcher.tasks_run, handle.batcher.batches_run
        rest_rows = call(handle.rest_address, predict, {
            "signature_name": "score",
            "instances": [{"inputs": s, "targets": t} for s, t in zip(sources, targets)]})
        rest_columns = call(handle.rest_address, predict, {
            "signature_name": "score", "inputs": {"inputs": sources, "targets": targets}})
        # Sinusoids take targets of any length, as the search's outputs may be.
        long_target = client.translate(["hola"], server=handle.address, signature="score",
                                       targets=["a " * 300], timeout=60)
        refused = call(handle.rest_address, predict, {
            "signature_name": "score", "inputs": {"inputs": ["a", "b"], "targets": ["x"]}})
    assert_same_scores(over_grpc, expected)
    assert_same_scores(merged, expected, atol=1e-5)
    assert batches < tasks
    status, body = rest_rows
    assert status == 200, body
    assert_same_scores([(p["scores"], p["normalized_scores"], p["token_scores"][:p["lengths"]])
                        for p in body["predictions"]], expected)
    status, body = rest_columns
    assert status == 200, body
    outputs = body["outputs"]
    assert_same_scores([(s, n, row[:length]) for s, n, row, length in zip(
        outputs["scores"], outputs["normalized_scores"], outputs["token_scores"],
        outputs["lengths"])], expected)
    assert translator.model.transformer_config.max_length < 300
    assert_same_scores(long_target, translator.score_texts(["hola"], ["a " * 300]))
    assert len(long_target[0].token_scores) == 301
    # Request batching refuses inputs of unequal batches itself, as TF Serving's does; the
    # graph names the input.
    status, body = refused
    assert status == 400 and "must have equal 0th-dimension size" in body["error"], body
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"score: targets must have one value per sentence: inputs has\] "
                             r"\[2\] \[values and targets has\] \[1\]"):
        client.load_saved_model(path).signatures["score"](inputs=tf.constant(["a", "b"]),
                                                          targets=tf.constant(["x"]))


def test_document_signature_answers_alike_in_a_fresh_process_in_process_and_served(
        exported, translator):
    """`translate_document` of the export keeps each document's spacing and answers as the
    in-memory Translator in a process with tensorflow and tensorflow_text only, through
    translate_saved_model, over gRPC and REST."""
    base, path = exported
    documents = ["  " + SENTENCES[0] + " " + SENTENCES[1] + "\n\n" + SENTENCES[2] + "\n",
                 "", SENTENCES[4], SENTENCES[1] + "  " + SENTENCES[0]]
    expected = {name: value.numpy() for name, value in
                translator.translate_document(tf.constant(documents)).items()}
    texts = [t.decode("utf-8") for t in expected["translations"]]
    alone = {s: text for s, (text, _) in zip(SENTENCES, translator.translate_texts(SENTENCES))}
    assert texts[0] == "  " + alone[SENTENCES[0]] + " " + alone[SENTENCES[1]] + "\n\n" + \
        alone[SENTENCES[2]] + "\n"
    assert expected["sentences"].tolist() == [5, 1, 1, 2]
    fresh = run_in_fresh_process(path, {"translate_document": {"inputs": documents}})
    assert fresh["translate_document"]["translations"] == texts
    assert fresh["translate_document"]["shape/splits"] == list(expected["splits"].shape)
    assert fresh["translate_document"]["splits"] == expected["splits"].ravel().tolist()

    def assert_expected(got):
        assert [d.text for d in got] == texts
        assert [list(d.splits) for d in got] == [
            row[:n].tolist() for row, n in zip(expected["splits"], expected["sentences"])]
        for document, row, n in zip(got, expected["scores"], expected["sentences"]):
            np.testing.assert_allclose(document.scores, row[:n], atol=1e-5)

    assert_expected(client.translate_saved_model(documents, client.load_saved_model(path),
                                                 "translate_document", batch_size=3))
    predict = "/v1/models/tfformer:predict"
    with server.start_server(os.path.join(base, "tfformer"), "tfformer",
                             rest_api_port=0) as handle:
        assert_expected(client.translate(documents, server=handle.address,
                                         signature="translate_document", timeout=60))
        status, body = call(handle.rest_address, predict, {
            "signature_name": "translate_document", "instances": documents})
    assert status == 200, body
    assert [p["translations"] for p in body["predictions"]] == texts
    assert [p["sentences"] for p in body["predictions"]] == expected["sentences"].tolist()
