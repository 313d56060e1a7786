"""tfformer-import of Hugging Face Marian (OPUS-MT) directories, against transformers' own
MarianTokenizer and MarianMTModel on the same files (tests/marian_dir.py makes them offline)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch
import transformers

from tests.compat_python import compat_python
from tests.marian_dir import LANGUAGE_CODES, make_marian_dir, sample_sentences
from tfformer.data.marian_pieces import MarianPieces, split_language_code
from tfformer.data.marian_tokenizer import MarianTokenizer as GraphMarianTokenizer
from tfformer.decode.search import beam_search, greedy_search
from tfformer.decode.translator import load_translator
from tfformer.export.saved_model import check_ops, translate_in_fresh_process
from tfformer.pretrained.marian import import_marian, read_marian
from tfformer.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID

# The layouts the tests cover: (name, make_marian_dir's arguments).
LAYOUTS = {
    "shared-swish-multilingual": dict(activation="swish", multilingual=True, vocab=400,
                                      train_steps=300),
    "separate-relu": dict(activation="relu", separate=True, seed=1, vocab=400, train_steps=300,
                          safetensors=False),
}
EXTRA = 12  # max output = source tokens + EXTRA: short, so that generate's runs are quick


class Imported:
    """A Marian directory, transformers' tokenizer and model of it, and its import."""

    def __init__(self, root, name, arguments):
        self.directory = str(root / name)
        made = make_marian_dir(self.directory, **arguments)
        self.vocab, self.target_vocab = made["vocab"], made["target_vocab"]
        self.hf_tokenizer = transformers.MarianTokenizer.from_pretrained(self.directory)
        self.hf_model = transformers.MarianMTModel.from_pretrained(self.directory).eval()
        self.run_dir = str(root / f"{name}-run")
        self.result = import_marian(self.directory, self.run_dir)
        self.marian = read_marian(self.directory)
        self.codes = LANGUAGE_CODES if arguments.get("multilingual") else ()
        self.sentences = sample_sentences(200, codes=self.codes)

    def to_marian(self, ids, side="target"):
        order = self.marian.target_order if side == "target" else self.marian.source_order
        return [int(order[i]) for i in ids]

    def to_ours(self, marian_ids, side="target"):
        order = self.marian.target_order if side == "target" else self.marian.source_order
        ours = {int(m): t for t, m in enumerate(order) if t != BOS_ID}
        return [ours[int(i)] for i in marian_ids]


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def imported(request, tmp_path_factory):
    return Imported(tmp_path_factory.mktemp("marian"), request.param, LAYOUTS[request.param])


def hf_generate(imported, sentences, num_beams=1, **options):
    """transformers' generate on each sentence alone, with our per-sentence length limit (its
    source tokens + EXTRA, EOS included); returns the Marian ids of each output, without the
    decoder start."""
    outputs = []
    for sentence in sentences:
        inputs = imported.hf_tokenizer([sentence], return_tensors="pt")
        with torch.no_grad():
            tokens = imported.hf_model.generate(
                **inputs, num_beams=num_beams, do_sample=False,
                max_new_tokens=inputs["input_ids"].shape[1] + EXTRA, **options)
        ids = tokens[0, 1:].tolist()
        if EOS_MARIAN in ids:
            ids = ids[:ids.index(EOS_MARIAN) + 1]
        outputs.append(ids)
    return outputs


EOS_MARIAN = 0  # the directories' </s>, as OPUS-MT's


# -- the vocabulary ------------------------------------------------------------------------

def test_language_codes_split_as_marian_tokenizer_splits_them():
    assert split_language_code(">>fra<< Hola") == (">>fra<<", " Hola")
    assert split_language_code(">>fra<<Hola") == (">>fra<<", "Hola")
    assert split_language_code("Hola >>fra<<") == (None, "Hola >>fra<<")
    assert split_language_code(">>fra Hola") == (None, ">>fra Hola")
    assert split_language_code(">><<x") == (">><<", "x")


def test_source_ids_equal_marian_tokenizers_in_python_and_in_the_graph(imported):
    sentences = imported.sentences
    expected = [imported.hf_tokenizer(s)["input_ids"] for s in sentences]
    pieces = MarianPieces.from_dir(imported.run_dir)
    python = [imported.to_marian(row + [EOS_ID], "source")
              for row in pieces.encode_source_ids(sentences)]
    graph = GraphMarianTokenizer(pieces).encode_source(tf.constant(sentences)).to_list()
    assert python == expected
    assert [imported.to_marian(row, "source") for row in graph] == expected
    # The sentences reach every rule: unknown pieces, language codes, an empty text.
    unk = imported.hf_tokenizer.unk_token_id
    assert sum(unk in row for row in expected) >= 3
    assert expected[0] == [imported.hf_tokenizer.eos_token_id]
    if imported.codes:
        code_ids = {imported.vocab[c] for c in LANGUAGE_CODES}
        assert sum(row[0] in code_ids for row in expected) >= 50
        assert expected[-1][0] == unk  # >>xxx<< is not in the vocabulary


def test_target_ids_equal_marian_tokenizers_text_target(imported):
    targets = [s for s in imported.sentences if not s.startswith(">>")][:100]
    expected = [imported.hf_tokenizer(text_target=t)["input_ids"] for t in targets]
    pieces = MarianPieces.from_dir(imported.run_dir)
    python = [imported.to_marian(row + [EOS_ID]) for row in pieces.encode(targets)]
    graph = GraphMarianTokenizer(pieces).encode_target(tf.constant(targets))[1].to_list()
    assert python == expected
    assert [imported.to_marian(row) for row in graph] == expected


def test_decoding_equals_batch_decode_skipping_special_tokens(imported):
    """Random rows of target ids (EOS, PAD, UNK and language codes among them) decode as
    transformers' batch_decode(skip_special_tokens=True) decodes them."""
    rng = np.random.default_rng(0)
    size = imported.result.config.vocab_size
    rows = rng.integers(0, size, (64, 12))
    rows[rows == BOS_ID] = UNK_ID
    rows[:8, 5] = EOS_ID  # what follows EOS is not text
    rows[8:16, -3:] = PAD_ID
    pieces = MarianPieces.from_dir(imported.run_dir)
    marian_rows = []
    for row in rows.tolist():
        row = row[:row.index(EOS_ID)] if EOS_ID in row else row
        marian_rows.append(imported.to_marian([t for t in row if t != PAD_ID]))
    expected = imported.hf_tokenizer.batch_decode(marian_rows, skip_special_tokens=True)
    graph = GraphMarianTokenizer(pieces).detokenize(tf.constant(rows, tf.int32)).numpy()
    assert pieces.decode(rows) == expected
    assert [text.decode("utf-8") for text in graph] == expected
    assert sum(bool(text) for text in expected) >= 50


# -- the model -----------------------------------------------------------------------------

def test_logits_equal_marian_mt_models_on_a_padded_batch(imported):
    sentences = [s for s in imported.sentences if s.strip()][:24]
    targets = [s[::-1] for s in sentences]
    batch = imported.hf_tokenizer(sentences, text_target=targets, return_tensors="pt",
                                  padding=True)
    labels = batch["labels"].numpy()
    pad = imported.hf_model.config.pad_token_id
    start = np.full((len(sentences), 1), imported.hf_model.config.decoder_start_token_id)
    decoder_in = np.concatenate([start, labels[:, :-1]], axis=1)
    with torch.no_grad():
        expected = imported.hf_model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
            decoder_input_ids=torch.tensor(decoder_in)).logits.numpy()
    model = keras.models.load_model(os.path.join(imported.run_dir, "model.keras"),
                                    compile=False)
    source = np.array([imported.to_ours(row, "source") for row in batch["input_ids"].tolist()])
    target_in = np.array([[BOS_ID] + imported.to_ours(row[1:]) for row in decoder_in.tolist()])
    ours = keras.ops.convert_to_numpy(model((source, target_in)))
    ours = ours[..., imported.to_ours(range(expected.shape[-1]))]  # in Marian's id order
    real = labels != pad  # past a target's EOS, only padding
    assert real.sum() > 100 and (~real).sum() > 20  # a padded batch
    assert np.abs(ours - expected)[real].max() < 1e-5


def test_greedy_search_equals_generate(imported):
    """Our greedy search (the SavedModel's, in the graph) gives generate(num_beams=1)'s tokens
    on 64 sentences, EOS forced at the same per-sentence limit."""
    sentences = imported.sentences[:64]
    translator = load_translator(imported.run_dir, beam_size=1, max_output_extra=EXTRA)
    source_ids = translator.tokenizer.encode_source(tf.constant(sentences)).to_tensor()
    result = greedy_search(translator.model, source_ids, EXTRA)
    ours = []
    for row in result.tokens[:, 0].numpy().tolist():
        row = row[:row.index(EOS_ID) + 1] if EOS_ID in row else [t for t in row if t != PAD_ID]
        ours.append(imported.to_marian(row))
    expected = hf_generate(imported, sentences)
    assert ours == expected
    ended = sum(len(row) <= len(src) + EXTRA - 1 for row, src in zip(
        expected, source_ids.numpy().tolist()))
    assert ended >= 16  # many end of their own accord, before the forced EOS


# -- the import ----------------------------------------------------------------------------

def test_imported_run_records_its_source_and_the_mapped_config(imported):
    config = imported.result.config
    assert config.sinusoid_layout == "halves" and config.final_logits_bias
    assert config.layer_norm_epsilon == 1e-5
    assert config.vocab_size == len(imported.target_vocab) + 1  # BOS
    separate = imported.vocab is not imported.target_vocab
    assert config.share_embeddings is not separate
    assert config.source_vocab_size == (len(imported.vocab) + 1 if separate else 0)
    with open(os.path.join(imported.run_dir, "pretrained.json"), encoding="utf-8") as f:
        record = json.load(f)
    assert record["source"] == os.path.abspath(imported.directory)
    weights = "pytorch_model.bin" if separate else "model.safetensors"
    assert weights in record["files"] and len(record["files"][weights]) == 64


def _corrupt(directory, tmp_path, name, change):
    """A copy of the Marian `directory` with `change` applied to its JSON file `name`."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(directory, copy)
    if change is None:
        os.remove(copy / name)
    else:
        path = copy / name
        values = json.loads(path.read_text())
        change(values)
        path.write_text(json.dumps(values))
    return str(copy)


@pytest.mark.parametrize("name, change, message", [
    ("config.json", lambda c: c.update(model_type="bart"), "model_type is 'bart'"),
    ("config.json", lambda c: c.update(normalize_before=True), "normalize_before"),
    ("config.json", lambda c: c.update(activation_function="tanh"), "activation_function"),
    ("config.json", lambda c: c.update(vocab_size=c["vocab_size"] + 1), "vocab_size"),
    ("config.json", lambda c: c.update(scale_embedding=False), "scale_embedding"),
    ("config.json", lambda c: c.update(decoder_ffn_dim=8), "decoder_ffn_dim"),
    ("vocab.json", lambda v: v.pop("<unk>"), "<unk>"),
    ("target.spm", None, "target.spm not found"),
    ("model.safetensors", None, "has no weights"),
])
def test_import_refuses_what_it_does_not_support_naming_it(imported, tmp_path, name, change,
                                                            message):
    if name == "model.safetensors" and not os.path.exists(
            os.path.join(imported.directory, name)):
        name = "pytorch_model.bin"
    out = tmp_path / "run"
    with pytest.raises((ValueError, FileNotFoundError), match=message.replace("(", r"\(")):
        import_marian(_corrupt(imported.directory, tmp_path, name, change), out)
    assert not out.exists()


def test_tfformer_import_program_exits_0_with_progress_then_2_naming_the_problem(
        imported, tmp_path):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "tfformer.cli.import_pretrained", imported.directory,
               "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert [line.split(":")[1].split()[0] for line in lines[:-1]] == ["reading", "read",
                                                                      "writing"]
    assert json.loads(lines[-1])["run_dir"] == str(out)
    assert sorted(os.listdir(out)) == ["config.json", "model.keras", "pretrained.json",
                                       "source.spm", "target.spm", "vocabulary.json"]
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "is not an empty directory" in again.stderr
    assert "Traceback" not in again.stderr


# -- the export ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def exported(imported, tmp_path_factory):
    """The imported run exported with greedy search (checked op by op and in a fresh
    process), and the 64 sentences it was checked on."""
    from tfformer import run

    sentences = imported.sentences[:64]
    base = tmp_path_factory.mktemp("models")
    result = run.export(imported.run_dir, str(base), "opus", beam_size=1,
                        max_output_extra=EXTRA, check_sentences=sentences)
    return result.export_dir, sentences


def test_exported_saved_model_translates_as_generate_and_batch_decode_under_tf_2_20(
        imported, exported):
    export_dir, sentences = exported
    assert {"LookupTableFindV2", "SentencepieceOp"} <= check_ops(export_dir)  # all stock ops
    got = translate_in_fresh_process(export_dir, sentences, python=compat_python())
    expected = imported.hf_tokenizer.batch_decode(hf_generate(imported, sentences),
                                                  skip_special_tokens=True)
    assert got["translations"] == expected
    assert sum(bool(text) for text in expected) >= 32


# -- the CTranslate2 export ----------------------------------------------------------------

def test_ctranslate2_export_reproduces_our_model_and_generates_as_transformers(imported,
                                                                            tmp_path):
    """tfformer-export --format ctranslate2 of the imported run reproduces our log-probabilities
    (its own check), and CTranslate2's greedy search on it gives generate(num_beams=1)'s tokens
    wherever generate ended before its length limit. With one shared vocabulary, its greedy and
    beam 4 translations are those of CTranslate2's own TransformersConverter of the same Marian
    directory, which registers one vocabulary for both sides and so refuses separate ones; and
    our own beam search is compared with that conversion's."""
    import ctranslate2

    from tfformer.export.ctranslate2 import TRANSLATE_OPTIONS, Vocabulary, export_ctranslate2

    sentences = [s for s in imported.sentences if s.strip()][:48]
    result = export_ctranslate2(imported.run_dir, tmp_path / "ours", check_sentences=sentences)
    assert result.max_log_prob_difference < 1e-4
    separate = imported.vocab is not imported.target_vocab
    written = sorted(os.listdir(tmp_path / "ours"))
    assert written == sorted(["config.json", "model.bin", "source.spm", "target.spm"] + (
        ["source_vocabulary.json", "target_vocabulary.json"] if separate
        else ["shared_vocabulary.json"]))
    config = imported.result.config
    vocabulary = Vocabulary(imported.run_dir, config.vocab_size, config.source_vocabulary_size)
    translator = ctranslate2.Translator(str(tmp_path / "ours"), device="cpu")
    results = translator.translate_batch([vocabulary.source_tokens(s) for s in sentences],
                                         beam_size=1, max_decoding_length=200,
                                         **TRANSLATE_OPTIONS)
    expected = hf_generate(imported, sentences)
    limits = [len(imported.hf_tokenizer(s)["input_ids"]) + EXTRA for s in sentences]
    compared = 0
    for result, marian_ids, limit in zip(results, expected, limits):
        if len(marian_ids) < limit:  # generate ended of its own accord
            ids = imported.to_marian(vocabulary.target.index(p) for p in result.hypotheses[0])
            assert ids + [EOS_MARIAN] == marian_ids
            compared += 1
    assert compared >= 24
    converter = ctranslate2.converters.TransformersConverter(imported.directory)
    theirs_dir = str(tmp_path / "theirs")
    if separate:
        with pytest.raises(ValueError, match="vocabulary"):
            converter.convert(theirs_dir)
        return
    converter.convert(theirs_dir)
    theirs = ctranslate2.Translator(theirs_dir, device="cpu")
    # Their model takes MarianTokenizer's tokens with its </s>; ours appends our EOS itself.
    their_sources = [imported.hf_tokenizer.convert_ids_to_tokens(
        imported.hf_tokenizer(s)["input_ids"]) for s in sentences]
    our_sources = [vocabulary.source_tokens(s) for s in sentences]
    for beam_size in (1, 4):
        options = dict(beam_size=beam_size, max_decoding_length=60, min_decoding_length=0)
        mine = translator.translate_batch(our_sources, **options,
                                          suppress_sequences=TRANSLATE_OPTIONS[
                                              "suppress_sequences"])
        reference = theirs.translate_batch(their_sources, **options)
        assert [r.hypotheses[0] for r in mine] == [r.hypotheses[0] for r in reference]
    compare_beam_search_with_ctranslate2(imported, theirs)


def compare_beam_search_with_ctranslate2(imported, theirs):
    """Our beam 4 (length_penalty_form "power") against CTranslate2's beam 4 on its own
    conversion, on 64 sentences, where both ended before our length limit. Without a length
    penalty, token-identical on every sentence with a source (CTranslate2 answers an empty
    source with an empty translation, undecoded). With alpha 0.6 two rules of CTranslate2
    differ: it stops once k = 4 hypotheses are finished (patience 1; ours, once no live one
    can beat them), and its |Y| leaves EOS out. With patience 4 (it stops at 16 finished) the
    first rule goes, and at most one sentence differs: counted, in docs/limitations.md."""
    sentences = [s for s in imported.sentences[:64 + 2] if s.strip()][:64]
    translator = load_translator(imported.run_dir, beam_size=4)
    source_ids = translator.tokenizer.encode_source(tf.constant(sentences)).to_tensor()
    limits = [int(n) + EXTRA for n in np.sum(source_ids.numpy() != PAD_ID, axis=1)]
    sources = [imported.hf_tokenizer.convert_ids_to_tokens(imported.hf_tokenizer(s)["input_ids"])
               for s in sentences]
    differ, compared = {}, {}
    for alpha, patience in ((0.0, 1), (0.6, 1), (0.6, 4)):
        result = beam_search(translator.model, source_ids, 4, alpha, EXTRA,
                             length_penalty_form="power")
        ours = [imported.to_marian(row[:row.index(EOS_ID) + 1])
                for row in result.tokens[:, 0].numpy().tolist()]
        compared[alpha, patience] = differ[alpha, patience] = 0
        for source, mine, limit in zip(sources, ours, limits):
            # One sentence a call: CTranslate2's length limit is per call, ours per sentence.
            best = theirs.translate_batch([source], beam_size=4, length_penalty=alpha,
                                          patience=patience, max_decoding_length=limit,
                                          min_decoding_length=0)[0].hypotheses[0]
            marian_ids = imported.hf_tokenizer.convert_tokens_to_ids(best) + [EOS_MARIAN]
            if len(mine) < limit and len(marian_ids) < limit:
                compared[alpha, patience] += 1
                differ[alpha, patience] += marian_ids != mine
        assert compared[alpha, patience] >= 48, compared
    assert differ[0.0, 1] == 0
    assert differ[0.6, 1] <= 64 // 8, differ
    assert differ[0.6, 4] <= 1, differ  # what |Y| without EOS may still flip
    return differ, compared


# -- beam search against generate ----------------------------------------------------------

def test_beam_search_with_the_power_length_penalty_equals_generate(imported):
    """Beam 4 with lp(Y) = |Y| ** alpha, Hugging Face's form, against generate(num_beams=4) on
    64 sentences: token-identical with early_stopping="never" (generate's exact stopping rule,
    ours), except where a hypothesis reaches the length limit, where generate gives the forced
    EOS log-probability 0 and we keep its own. With generate's default early_stopping=False
    (a search that stops once no alive beam beats the finished ones at the current length),
    some sentences differ: counted, in docs/limitations.md."""
    sentences = imported.sentences[:64]
    alpha = 1.0  # generate's default length_penalty
    translator = load_translator(imported.run_dir, beam_size=4, length_penalty=alpha,
                                 max_output_extra=EXTRA, length_penalty_form="power")
    source_ids = translator.tokenizer.encode_source(tf.constant(sentences)).to_tensor()
    result = beam_search(translator.model, source_ids, 4, alpha, EXTRA,
                         length_penalty_form="power")
    ours = []
    for row in result.tokens[:, 0].numpy().tolist():
        ours.append(imported.to_marian(row[:row.index(EOS_ID) + 1]))
    limits = [int(n) + EXTRA for n in np.sum(source_ids.numpy() != PAD_ID, axis=1)]
    exact = hf_generate(imported, sentences, num_beams=4, length_penalty=alpha,
                        early_stopping="never")
    ended = [len(row) < limit for row, limit in zip(exact, limits)]
    assert sum(ended) >= 32
    assert [o for o, e in zip(ours, ended) if e] == [x for x, e in zip(exact, ended) if e]
    default = hf_generate(imported, sentences, num_beams=4, length_penalty=alpha)
    differ = sum(o != d for o, d, e in zip(ours, default, ended) if e)
    assert differ <= sum(ended) // 4, differ


# -- fine-tuning: one step's loss and gradients ---------------------------------------------

def test_one_training_step_has_marian_mt_models_loss_and_gradients(imported):
    """Label smoothing 0, float32, a padded batch of 4 pairs: our loss (the run's compiled one,
    BOS out of the softmax) equals MarianMTModel(labels=...).loss within 1e-5, and every
    gradient equals PyTorch's within 1e-4, mapped into our layout by the importer's own
    `set_weights`. final_logits_bias, a buffer in transformers, is made a parameter for the
    comparison (we train it, as Marian does). transformers' embedding drops the gradient of its
    `<pad>` row's lookups (padding_idx), which for the decoder start is real: with padding_idx
    off, its `<pad>` row's gradient is our PAD row's (the logits) plus our BOS row's (the
    decoder start)."""
    import copy

    from tfformer.data.builtin.grammar import builtin_pairs
    from tfformer.data.tokenizer import load_tokenizer
    from tfformer.model.compile_transformer import compile_transformer
    from tfformer.model.transformer import Transformer
    from tfformer.pretrained.marian import set_weights

    pairs = builtin_pairs("dev", n=4, seed=3)
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    tokenizer = load_tokenizer(imported.run_dir)
    source_ids = tokenizer.encode_source(tf.constant(sources)).to_tensor()
    target_in, target_out = (ids.to_tensor() for ids in
                             tokenizer.encode_target(tf.constant(targets)))
    model = keras.models.load_model(os.path.join(imported.run_dir, "model.keras"), compile=False)
    assert not model.transformer_config.bos_in_softmax
    compile_transformer(model, label_smoothing=0.0)
    with tf.GradientTape() as tape:
        loss = model.loss(target_out, model((source_ids, target_in), training=False))
    ours = [tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss,
                                                                   model.trainable_weights)]

    hf_model = copy.deepcopy(imported.hf_model).eval()
    bias = torch.nn.Parameter(hf_model.final_logits_bias.detach().clone())
    del hf_model._buffers["final_logits_bias"]
    hf_model.final_logits_bias = bias
    for module in hf_model.modules():
        if isinstance(module, torch.nn.Embedding):
            module.padding_idx = None
    batch = imported.hf_tokenizer(sources, text_target=targets, padding=True,
                                  return_tensors="pt")
    batch["labels"][batch["labels"] == imported.hf_tokenizer.pad_token_id] = -100
    hf_loss = hf_model(**batch).loss
    hf_loss.backward()
    assert abs(float(loss) - hf_loss.item()) < 1e-5, (float(loss), hf_loss.item())
    grads = {name: p.grad.numpy() for name, p in hf_model.named_parameters()
             if p.grad is not None}
    reference = Transformer(model.transformer_config)
    reference.build()
    set_weights(reference, grads, imported.marian.source_order, imported.marian.target_order)
    expected = [w.numpy() for w in reference.trainable_weights]
    for weight, mine, theirs in zip(model.trainable_weights, ours, expected):
        name = weight.path
        if weight is model.embedding.embeddings:
            mine = mine.copy()
            mine[PAD_ID] += mine[BOS_ID]
            mine, theirs = np.delete(mine, BOS_ID, 0), np.delete(theirs, BOS_ID, 0)
        if weight is model.embedding.bias:  # BOS's column is out of the softmax: no gradient
            assert mine[BOS_ID] == 0
            mine, theirs = np.delete(mine, BOS_ID), np.delete(theirs, BOS_ID)
        np.testing.assert_allclose(mine, theirs, atol=1e-4, rtol=0, err_msg=name)
    assert len(ours) == len(expected) and np.abs(ours[0]).max() > 1e-3
