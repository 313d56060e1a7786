"""tfformer-export --format ctranslate2: the run's model as a CTranslate2 model directory that
scores and searches exactly as our model does."""

import importlib.util
import json
import os

import numpy as np
import pytest

if importlib.util.find_spec("ctranslate2") is None:
    MESSAGE = "ctranslate2 is not installed (pip install -e '.[ctranslate2]')"
    if os.environ.get("CI"):  # `make test` installs it (the test extra)
        pytest.fail(MESSAGE, pytrace=False)
    pytest.skip(MESSAGE, allow_module_level=True)

import ctranslate2  # noqa: E402
import keras  # noqa: E402
import sentencepiece as spm  # noqa: E402
import tensorflow as tf  # noqa: E402

from tests.benchmark_script import load_benchmark  # noqa: E402
from tfformer import Transformer, TransformerConfig  # noqa: E402
from tfformer.cli.export import main as export_main  # noqa: E402
from tfformer.data.builtin import builtin_pairs  # noqa: E402
from tfformer.data.tokenizer import Tokenizer  # noqa: E402
from tfformer.decode.search import beam_search, greedy_search  # noqa: E402
from tfformer.export import ctranslate2 as ct2_export  # noqa: E402
from tfformer.special_tokens import BOS_ID, EOS_ID, PAD_ID  # noqa: E402

pytestmark = pytest.mark.slow  # they train or export a model

PAIRS = builtin_pairs("test", n=64)
EXTRA = 50  # our max_output_extra; CTranslate2 gets max_decoding_length=MAX_DECODING
MAX_DECODING = 256
SMALL = dict(d_model=32, num_heads=4, d_ff=64, num_encoder_layers=2, num_decoder_layers=2)


def perturb(directory, seed: int) -> None:
    """Gives every weight of the run's model.keras random values (biases, LayerNorm gammas and
    betas too: a weight copied to the wrong place must show), and EOS a larger embedding, so
    that hypotheses end at different lengths well before the limit."""
    model = keras.models.load_model(directory / "model.keras", compile=False)
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        value = keras.ops.convert_to_numpy(variable)
        variable.assign(value + rng.normal(0.0, 0.1, value.shape).astype(value.dtype))
    embeddings = keras.ops.convert_to_numpy(model.embedding.embeddings)
    embeddings[EOS_ID] *= 3.0
    model.embedding.embeddings.assign(embeddings)
    model.save(directory / "model.keras")


@pytest.fixture(scope="module")
def run_dir(trained_run_dir):
    """The shared trained run (tests/conftest.py): outputs that end with EOS of their own accord
    and differ from sentence to sentence."""
    return trained_run_dir


@pytest.fixture(scope="module")
def exported(run_dir, tmp_path_factory):
    return ct2_export.export_ctranslate2(run_dir, tmp_path_factory.mktemp("ct2") / "model")


@pytest.fixture(scope="module")
def model(run_dir):
    return keras.models.load_model(run_dir / "model.keras", compile=False)


@pytest.fixture(scope="module")
def translator(exported):
    return ctranslate2.Translator(exported.path, device="cpu", compute_type="float32")


@pytest.fixture(scope="module")
def sentencepiece(run_dir):
    return spm.SentencePieceProcessor(model_file=str(run_dir / "tokenizer.model"))


@pytest.fixture(scope="module")
def source_ids(run_dir):
    tokenizer = Tokenizer.from_file(run_dir / "tokenizer.model")
    sources = tf.constant([source for source, _ in PAIRS])
    return tokenizer.encode_source(sources).to_tensor(default_value=PAD_ID)


def pieces(sentencepiece, texts):
    return [sentencepiece.encode(text, out_type=str) for text in texts]


def ours_best(result, source_ids, extra=EXTRA):
    """Our SearchResult's best hypotheses as id lists without EOS, None for one that reached the
    length limit: our search forces EOS there and CTranslate2's does not, so only hypotheses
    that ended with EOS of their own accord compare. Checks that nearly all did."""
    limits = np.sum(source_ids.numpy() != PAD_ID, axis=1) + extra
    hypotheses = []
    for row, limit in zip(result.tokens.numpy()[:, 0], limits):
        ids = list(row)
        length = ids.index(EOS_ID)
        hypotheses.append([int(i) for i in ids[:length]] if length + 1 < limit else None)
    assert sum(h is None for h in hypotheses) <= len(hypotheses) // 16, hypotheses
    return hypotheses


def comparable(theirs, ours):
    """CTranslate2's hypotheses where ours ended of their own accord, None where ours did not."""
    return [None if mine is None else hypothesis for hypothesis, mine in zip(theirs, ours)]


def ct2_best(results, sentencepiece):
    return [[sentencepiece.piece_to_id(p) for p in r.hypotheses[0]] for r in results]


def rescore(translator, sentencepiece, hypotheses):
    """log P(Y) of each hypothesis (EOS included) by CTranslate2's scorer."""
    sources = pieces(sentencepiece, [source for source, _ in PAIRS])
    targets = [[sentencepiece.id_to_piece(i) for i in ids] for ids in hypotheses]
    return np.array([sum(r.log_probs) for r in translator.score_batch(sources, targets)])


def test_export_writes_the_model_our_vocabulary_and_the_tokenizer(exported, run_dir,
                                                                   sentencepiece):
    assert sorted(os.listdir(exported.path)) == [
        "config.json", "model.bin", "shared_vocabulary.json", "tokenizer.model"]
    siblings = os.listdir(os.path.dirname(exported.path))
    assert siblings == ["model"]  # no temporary left beside it
    with open(os.path.join(exported.path, "shared_vocabulary.json"), encoding="utf-8") as f:
        vocabulary = json.load(f)
    assert vocabulary == [sentencepiece.id_to_piece(i)
                          for i in range(sentencepiece.get_piece_size())]
    assert vocabulary[:4] == ["<pad>", "<unk>", "<s>", "</s>"]
    with open(os.path.join(exported.path, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    assert config["layer_norm_epsilon"] == 1e-6  # ours, not CTranslate2's 1e-5
    assert (config["bos_token"], config["eos_token"], config["decoder_start_token"]) == (
        "<s>", "</s>", "<s>")
    assert config["add_source_eos"] is True and config["add_source_bos"] is False
    with open(os.path.join(exported.path, "tokenizer.model"), "rb") as copy, \
            open(run_dir / "tokenizer.model", "rb") as original:
        assert copy.read() == original.read()
    assert exported.weights == str(run_dir / "model.keras")
    assert exported.max_log_prob_difference < 1e-4  # the export's own check


def test_per_step_log_probabilities_match_ours(translator, model, sentencepiece):
    sources = [source for source, _ in PAIRS]
    targets = [target for _, target in PAIRS]
    results = translator.score_batch(pieces(sentencepiece, sources),
                                     pieces(sentencepiece, targets))
    differences, values = [], []
    for source, target, result in zip(sources, targets, results):
        ours = ct2_export.teacher_forced_log_probs(model, sentencepiece.encode(source),
                                                   sentencepiece.encode(target))
        assert len(result.log_probs) == len(ours)  # every target piece and EOS
        differences.append(np.max(np.abs(np.array(result.log_probs) - ours)))
        values.extend(ours)
    print(f"max |log-prob difference| over {len(values)} steps: {max(differences):.2e}")
    assert max(differences) < 1e-4
    assert np.std(values) > 0.5  # not a flat distribution: the comparison has teeth


def test_our_score_signature_gives_ctranslate2s_score_batch(translator, run_dir,
                                                           sentencepiece):
    """The Translator's `score` (the export's signature) and the keras.ops scorer, batched and
    padded, against CTranslate2's score_batch on the same weights: each token within 1e-4."""
    from tfformer.decode import scoring
    from tfformer.decode.translator import load_translator

    ours = load_translator(run_dir)
    sources = [source for source, _ in PAIRS] + ["hola", ""]
    targets = [target for _, target in PAIRS] + ["", "hello"]
    results = translator.score_batch(pieces(sentencepiece, sources),
                                     pieces(sentencepiece, targets))
    graph = ours.score_texts(sources, targets)
    anywhere = scoring.score_texts(ours.model, ours.tokenizer, sources, targets)
    for result, (score, normalized, token_scores), other in zip(results, graph, anywhere):
        theirs = np.array(result.log_probs)
        np.testing.assert_allclose(token_scores, theirs, atol=1e-4)
        np.testing.assert_allclose(other[2], theirs, atol=1e-4)
        np.testing.assert_allclose([score, normalized], [theirs.sum(), theirs.mean()],
                                   atol=1e-3)


def test_greedy_search_gives_our_tokens(translator, model, sentencepiece, source_ids):
    ours = ours_best(greedy_search(model, source_ids, EXTRA), source_ids)
    results = translator.translate_batch(
        pieces(sentencepiece, [s for s, _ in PAIRS]), beam_size=1, length_penalty=0,
        max_decoding_length=MAX_DECODING, return_scores=True, **ct2_export.TRANSLATE_OPTIONS)
    assert comparable(ct2_best(results, sentencepiece), ours) == ours
    ended = [h for h in ours if h is not None]
    assert len({len(h) for h in ended}) > 8 and len({tuple(h) for h in ended}) == len(ended)


def test_beam_search_without_length_penalty_gives_our_tokens_and_scores(
        translator, model, sentencepiece, source_ids):
    result = beam_search(model, source_ids, beam_size=4, length_penalty=0.0, max_output_extra=EXTRA)
    ours = ours_best(result, source_ids)
    results = translator.translate_batch(
        pieces(sentencepiece, [s for s, _ in PAIRS]), beam_size=4, length_penalty=0,
        max_decoding_length=MAX_DECODING, **ct2_export.TRANSLATE_OPTIONS)
    theirs = ct2_best(results, sentencepiece)
    assert comparable(theirs, ours) == ours
    greedy = ours_best(greedy_search(model, source_ids, EXTRA), source_ids)
    assert ours != greedy  # the beam found other hypotheses than greedy search
    ended = [i for i, h in enumerate(ours) if h is not None]
    np.testing.assert_allclose(rescore(translator, sentencepiece, theirs)[ended],
                               result.scores.numpy()[ended, 0], atol=1e-4)


def test_beam_search_with_length_penalty_and_our_scores_from_its_outputs(
        translator, model, sentencepiece, source_ids):
    """alpha = 0.6: CTranslate2 normalizes by |Y|^alpha, we by ((5 + |Y|) / 6)^alpha, so the
    best hypotheses may differ; most agree, and our score is computable from CTranslate2's."""
    result = beam_search(model, source_ids, beam_size=4, length_penalty=0.6, max_output_extra=EXTRA)
    ours = ours_best(result, source_ids)
    results = translator.translate_batch(
        pieces(sentencepiece, [s for s, _ in PAIRS]), beam_size=4, length_penalty=0.6,
        max_decoding_length=MAX_DECODING, return_scores=True, **ct2_export.TRANSLATE_OPTIONS)
    theirs = ct2_best(results, sentencepiece)
    same = [i for i in range(len(PAIRS)) if theirs[i] == ours[i]]
    print(f"alpha 0.6: {len(same)} of {len(PAIRS)} best hypotheses identical")
    assert len(same) >= 0.75 * len(PAIRS)
    log_p = rescore(translator, sentencepiece, theirs)
    lengths = np.array([len(h) + 1 for h in theirs])  # |Y| with EOS
    our_scores = log_p / ((5.0 + lengths) / 6.0) ** 0.6
    np.testing.assert_allclose(our_scores[same], result.scores.numpy()[same, 0], atol=1e-4)


def test_pre_norm_learned_positions_and_separate_source_embedding(make_run_dir, tmp_path):
    directory = make_run_dir(seed=4, pairs=500, vocab_size=200, norm="pre",
                             positional="learned", share_embeddings=False, max_length=128,
                             layer_norm_epsilon=1e-3, **SMALL)
    perturb(directory, 4)
    result = ct2_export.export_ctranslate2(directory, tmp_path / "model")
    assert result.max_log_prob_difference < 1e-4
    model = keras.models.load_model(directory / "model.keras", compile=False)
    processor = spm.SentencePieceProcessor(model_file=str(directory / "tokenizer.model"))
    translator = ctranslate2.Translator(result.path, compute_type="float32")
    pairs = PAIRS[:16]
    scored = translator.score_batch(pieces(processor, [s for s, _ in pairs]),
                                    pieces(processor, [t for _, t in pairs]))
    for (source, target), scores in zip(pairs, scored):
        ours = ct2_export.teacher_forced_log_probs(model, processor.encode(source),
                                                   processor.encode(target))
        np.testing.assert_allclose(scores.log_probs, ours, atol=1e-4)
    with pytest.raises(ValueError, match="learned positions"):
        ct2_export.model_spec(model, [""] * 200, max_positions=129)


def test_a_run_without_model_keras_exports_its_last_checkpoint(make_run_dir, tmp_path):
    directory = make_run_dir(seed=8, pairs=500, vocab_size=200, **SMALL)
    model = keras.models.load_model(directory / "model.keras", compile=False)
    (directory / "config.json").write_text(model.transformer_config.to_json())
    os.makedirs(directory / "checkpoints")
    model.save_weights(directory / "checkpoints" / "ckpt-00001.weights.h5")
    perturb(directory, 8)  # model.keras now differs from the checkpoint ...
    trained = keras.models.load_model(directory / "model.keras", compile=False)
    trained.save_weights(directory / "checkpoints" / "ckpt-00002.weights.h5")
    os.remove(directory / "model.keras")  # ... and is gone: the last checkpoint is exported
    result = ct2_export.export_ctranslate2(directory, tmp_path / "model")
    assert result.weights.endswith("ckpt-00002.weights.h5")
    reloaded = Transformer(TransformerConfig.from_json((directory / "config.json").read_text()))
    reloaded.build()
    reloaded.load_weights(result.weights)
    processor = spm.SentencePieceProcessor(model_file=str(directory / "tokenizer.model"))
    source, target = PAIRS[0]
    scores = ctranslate2.Translator(result.path).score_batch(
        [processor.encode(source, out_type=str)], [processor.encode(target, out_type=str)])
    ours = ct2_export.teacher_forced_log_probs(reloaded, processor.encode(source),
                                               processor.encode(target))
    np.testing.assert_allclose(scores[0].log_probs, ours, atol=1e-4)


def test_int8_quantization_writes_a_smaller_model_that_translates(run_dir, exported, tmp_path,
                                                                   sentencepiece):
    out = tmp_path / "int8"
    assert export_main([str(run_dir), "--format", "ctranslate2", "--out", str(out),
                        "--quantization", "int8"]) == 0
    size = os.path.getsize(out / "model.bin")
    assert size < 0.6 * os.path.getsize(os.path.join(exported.path, "model.bin"))
    translator = ctranslate2.Translator(str(out), compute_type="int8")
    results = translator.translate_batch(pieces(sentencepiece, [s for s, _ in PAIRS[:8]]),
                                         beam_size=4, max_decoding_length=MAX_DECODING,
                                         **ct2_export.TRANSLATE_OPTIONS)
    assert len({tuple(r.hypotheses[0]) for r in results}) > 1


def test_cli_writes_the_directory_and_reports_it(run_dir, tmp_path, capsys):
    out = tmp_path / "empty"
    os.makedirs(out)  # an empty directory is fine
    assert export_main([str(run_dir), "--format", "ctranslate2", "--out", str(out)]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["export_dir"] == str(out)
    assert report["quantization"] == "none"
    assert report["max_log_prob_difference"] < 1e-4
    assert "model.bin" in os.listdir(out)


def test_bad_input_exits_2_naming_the_problem_and_writes_nothing(run_dir, tmp_path, caplog):
    no_weights = tmp_path / "run"
    os.makedirs(no_weights)
    (no_weights / "tokenizer.model").write_bytes((run_dir / "tokenizer.model").read_bytes())
    out = tmp_path / "out"
    assert export_main([str(no_weights), "--format", "ctranslate2", "--out", str(out)]) == 2
    assert "model.keras" in caplog.text and "has no weights" in caplog.text
    assert not out.exists()

    full = tmp_path / "full"
    os.makedirs(full)
    (full / "keep.txt").write_text("mine")
    assert export_main([str(run_dir), "--format", "ctranslate2", "--out", str(full)]) == 2
    assert "not an empty directory" in caplog.text
    assert os.listdir(full) == ["keep.txt"]

    with pytest.raises(SystemExit) as exit_info:
        export_main([str(run_dir), "--format", "ctranslate2", "--out", str(out),
                     "--quantization", "int3"])
    assert exit_info.value.code == 2
    with pytest.raises(ValueError, match="unknown quantization 'int3'"):
        ct2_export.export_ctranslate2(run_dir, out, quantization="int3")
    with pytest.raises(SystemExit) as exit_info:  # --out is what a CTranslate2 export needs
        export_main([str(run_dir), "--format", "ctranslate2"])
    assert exit_info.value.code == 2
    assert sorted(os.listdir(tmp_path)) == ["full", "run"]


def test_a_model_that_fails_the_check_exits_1_and_leaves_nothing(run_dir, tmp_path,
                                                                 monkeypatch, caplog):
    monkeypatch.setattr(ct2_export, "CHECK_TOLERANCE", -1.0)  # no model can pass
    out = tmp_path / "model"
    assert export_main([str(run_dir), "--format", "ctranslate2", "--out", str(out)]) == 1
    assert "log-probabilities differ" in caplog.text
    assert os.listdir(tmp_path) == []  # neither the model nor its temporary


def test_our_quantization_names_are_ctranslate2s():
    from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES

    assert set(ct2_export.QUANTIZATIONS) == {"none", *ACCEPTED_MODEL_TYPES}
    assert BOS_ID == 2 and EOS_ID == 3  # the ids the vocabulary file is written in


def prefix_ids(sentencepiece, pieces_per_prefix=2):
    """Prefixes as an autocompletion would send them: the first pieces of a reference
    translation, int32 [batch, P] PAD-padded, and the pieces themselves. Even rows take their
    own reference's, which a trained model often starts with anyway; odd rows take the next
    sentence's, which it does not, so that many continuations differ from the free search's
    whatever the weights."""
    targets = [target for _, target in PAIRS]
    sources = [row if row % 2 == 0 else (row + 1) % len(targets) for row in range(len(targets))]
    prefixes = [sentencepiece.encode(targets[source], out_type=str)[:pieces_per_prefix]
                for source in sources]
    ids = np.zeros([len(PAIRS), pieces_per_prefix], "int32")
    for row, prefix in enumerate(prefixes):
        ids[row, :len(prefix)] = [sentencepiece.piece_to_id(p) for p in prefix]
    return ids, prefixes


@pytest.mark.parametrize("beam", [1, 4])
def test_a_forced_prefix_gives_ctranslate2s_target_prefix_tokens(
        translator, model, sentencepiece, source_ids, beam):
    ids, prefixes = prefix_ids(sentencepiece)
    if beam == 1:
        result = greedy_search(model, source_ids, EXTRA, prefix_ids=ids)
    else:
        result = beam_search(model, source_ids, beam_size=beam, length_penalty=0.0,
                             max_output_extra=EXTRA, prefix_ids=ids)
    ours = ours_best(result, source_ids, extra=EXTRA + ids.shape[1])
    results = translator.translate_batch(
        pieces(sentencepiece, [s for s, _ in PAIRS]), target_prefix=prefixes, beam_size=beam,
        length_penalty=0, max_decoding_length=MAX_DECODING, **ct2_export.TRANSLATE_OPTIONS)
    theirs = ct2_best(results, sentencepiece)
    assert comparable(theirs, ours) == ours
    assert all(h[:2] == list(row) for h, row in zip(theirs, ids))  # each starts with its prefix
    free = ours_best(greedy_search(model, source_ids, EXTRA), source_ids)
    assert sum(h != f for h, f in zip(ours, free)) > len(PAIRS) // 4  # the prefix changed them


@pytest.mark.parametrize("beam, n", [(1, 2), (4, 2), (4, 3)])
def test_no_repeat_ngram_gives_ctranslate2s_tokens(translator, model, sentencepiece,
                                                   source_ids, beam, n):
    if beam == 1:
        result = greedy_search(model, source_ids, EXTRA, no_repeat_ngram=n)
    else:
        result = beam_search(model, source_ids, beam_size=beam, length_penalty=0.0,
                             max_output_extra=EXTRA, no_repeat_ngram=n)
    ours = ours_best(result, source_ids)
    results = translator.translate_batch(
        pieces(sentencepiece, [s for s, _ in PAIRS]), beam_size=beam, length_penalty=0,
        no_repeat_ngram_size=n, max_decoding_length=MAX_DECODING,
        **ct2_export.TRANSLATE_OPTIONS)
    assert comparable(ct2_best(results, sentencepiece), ours) == ours
    free = ours_best(greedy_search(model, source_ids, EXTRA), source_ids)
    assert any(h != f for h, f in zip(ours, free))  # the rule acted on this model's outputs


def test_the_benchmarks_worker_translates_as_ctranslate2_in_a_process_without_tensorflow(
        exported, translator, sentencepiece):
    """benchmarks/decoding/ct2_process.py: the model in a child process that loads no TensorFlow,
    with the in-process Translator's hypotheses."""
    ct2_process = load_benchmark("ct2_process")
    sources = pieces(sentencepiece, [s for s, _ in PAIRS[:8]])
    options = dict(beam_size=4, length_penalty=0.6, max_decoding_length=MAX_DECODING,
                   **ct2_export.TRANSLATE_OPTIONS)
    expected = [r.hypotheses[0] for r in translator.translate_batch(sources, **options)]
    with ct2_process.CT2Process(exported.path, threads=1) as worker:
        assert worker.translate_batch(sources, hypotheses=True, **options) == expected
        assert worker.translate_batch(sources, **options) is None  # nothing crosses the pipe
        with open(f"/proc/{worker.process.pid}/maps") as maps:
            libraries = maps.read()
        assert "libctranslate2" in libraries and "tensorflow" not in libraries
    assert worker.process.returncode == 0
