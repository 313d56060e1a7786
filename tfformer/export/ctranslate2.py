"""A run's model as a CTranslate2 model directory, for fast CPU (and GPU) inference.

    RUN/ -> OUT/{model.bin, config.json, shared_vocabulary.json, tokenizer.model}
    an imported run -> OUT/{model.bin, config.json, shared_vocabulary.json or
                            source_vocabulary.json + target_vocabulary.json, source.spm,
                            target.spm}

CTranslate2 (https://github.com/OpenNMT/CTranslate2) runs the same network as our Keras model;
the conventions where the two differ are settled here, in the exported model, so that
CTranslate2 computes our log-probabilities:

- positions: our sinusoidal table interleaves sin and cos (even and odd columns, §3.5);
  CTranslate2's own table puts all sines before all cosines. The export writes our table
  (or our learned positions) as the model's position encodings, so CTranslate2 adds exactly
  ours; it holds `max_positions` rows, which bounds source and output lengths.
- LayerNorm epsilon: ours (1e-6 by default) is written to config.json (CTranslate2's default
  is 1e-5).
- post-norm or pre-norm as the run was trained; embeddings scaled by sqrt(d_model); one shared
  vocabulary (source, target, pre-softmax projection) whose ids are ours: <pad>=0, <unk>=1,
  <s>=2, </s>=3. An imported model (tfformer-import) keeps its activation, its sinusoid layout
  (written as its table, as ours), its logits bias, and its source and target vocabularies in
  our id order; CTranslate2 takes its source as `tfformer.data.marian_pieces` cuts it (a
  language code first) and its target pieces are the target SentencePiece model's.
- the source gets our EOS appended (`add_source_eos`), the decoder starts from our BOS and
  stops at our EOS: give CTranslate2 SentencePiece pieces, nothing else.

What stays a decoding option of CTranslate2 (see `TRANSLATE_OPTIONS`):
- `min_decoding_length=0`: CTranslate2 forbids EOS at the first step by default; our search
  allows an empty translation.
- `suppress_sequences=[["<pad>"], ["<s>"]]`: our search never emits PAD or BOS.
- `max_decoding_length`: one limit per call; ours is per sentence (source tokens + 50), with
  EOS forced at the limit.
- length penalty: CTranslate2 ranks finished hypotheses by log P(Y) / |Y|^alpha (|Y| without
  EOS) and stops once k hypotheses are finished; ours ranks by log P(Y) / ((5 + |Y|) / 6)^alpha
  (|Y| with EOS) and stops when no live hypothesis can beat the k finished ones. With
  `length_penalty=0` on both sides the best hypotheses are the same; with alpha = 0.6 they
  agree on most sentences, not all (61 of 64 in tests/test_ctranslate2_export.py).
- scores: `return_scores=True` gives CTranslate2's log P(Y) / |Y|^alpha, with PAD and BOS
  (suppressed) left out of each step's softmax. Our score of an output, exactly:
  `sum(score_batch(...).log_probs) / ((5 + n) / 6) ** alpha`, n = len(log_probs) (EOS counted).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from typing import Sequence

import numpy as np

from tfformer.special_tokens import BOS_PIECE, EOS_PIECE, PAD_PIECE, UNK_PIECE
from tfformer.utils.files import atomic_write
from tfformer.utils.run_dir import RunDir

logger = logging.getLogger(__name__)

# "none" keeps float32 weights; the rest are CTranslate2's weight types (ACCEPTED_MODEL_TYPES).
QUANTIZATIONS = ("none", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16",
                 "float16", "bfloat16", "float32")
# Default rows of the position table of a sinusoidal model: CTranslate2's default
# max_input_length (1024 pieces) plus our EOS; its default max_decoding_length is 256.
DEFAULT_MAX_POSITIONS = 1025
# translate_batch options that make CTranslate2's search follow ours (see the module doc).
TRANSLATE_OPTIONS = {"min_decoding_length": 0, "suppress_sequences": [[PAD_PIECE], [BOS_PIECE]]}
CHECK_SENTENCES = ("Los tres perros rojos comen manzanas verdes.",
                   "Una hermana visita el puente azul.", "¿Dónde está la biblioteca?")
# The written model's log-probabilities against ours, float32 weights (quantized: not checked).
CHECK_TOLERANCE = 1e-3


class CTranslate2ExportError(RuntimeError):
    """The written model does not load in CTranslate2 or does not reproduce our model."""


@dataclasses.dataclass
class CTranslate2Export:
    path: str
    weights: str  # the file the weights came from
    quantization: str
    max_log_prob_difference: float | None  # against our model on the check sentences


def find_weights(run_dir: str | os.PathLike) -> str:
    """The run's weights: model.keras, else its last epoch checkpoint (with config.json).

    Raises:
        FileNotFoundError: naming what a run needs.
    """
    from tfformer.train.checkpoints import CHECKPOINT_GLOB, list_checkpoints

    run = RunDir(run_dir)
    if not os.path.isdir(run.path):
        raise FileNotFoundError(f"no run directory {run.path}")
    if os.path.exists(run.model):
        return run.model
    checkpoints = list_checkpoints(run.checkpoints)
    if checkpoints and os.path.exists(run.config):
        return checkpoints[-1]
    raise FileNotFoundError(
        f"{run.path} has no weights: it needs {os.path.basename(run.model)}, or "
        f"{os.path.basename(run.config)} and {os.path.basename(run.checkpoints)}/"
        f"{CHECKPOINT_GLOB}")


def load_model(run_dir: str | os.PathLike, weights: str | os.PathLike | None = None):
    """The run's Transformer from `weights` (a .keras model or a .weights.h5 checkpoint of the
    run's config.json); by default from `find_weights`. Returns (model, weights path)."""
    import keras

    from tfformer.config import TransformerConfig
    from tfformer.model.transformer import Transformer

    run = RunDir(run_dir)
    weights = os.fspath(weights) if weights is not None else find_weights(run.path)
    if not os.path.isfile(weights):
        raise FileNotFoundError(f"weights file {weights} not found")
    if weights.endswith(".keras"):
        return keras.models.load_model(weights, compile=False), weights
    if not os.path.exists(run.config):
        raise FileNotFoundError(f"{weights} needs the run's {run.config} (the architecture)")
    with open(run.config, encoding="utf-8") as f:
        model = Transformer(TransformerConfig.from_json(f.read()))
    model.build()
    model.load_weights(weights)
    return model, weights


def _array(variable) -> np.ndarray:
    import keras

    return np.ascontiguousarray(keras.ops.convert_to_numpy(variable), dtype=np.float32)


def _set_linear(spec, kernel, bias, in_dim: int) -> None:
    """Ours: kernel [in, ...out] (x @ W); CTranslate2: weight [out, in] (x @ W^T)."""
    spec.weight = np.ascontiguousarray(_array(kernel).reshape(in_dim, -1).T)
    if bias is not None:
        spec.bias = _array(bias).reshape(-1)


def _fuse(spec, parts: Sequence[tuple], in_dim: int) -> None:
    """One CTranslate2 linear for several of ours (Q|K|V, or K|V), stacked on the out axis."""
    spec.weight = np.concatenate([_array(k).reshape(in_dim, -1).T for k, _ in parts])
    if all(b is not None for _, b in parts):
        spec.bias = np.concatenate([_array(b).reshape(-1) for _, b in parts])


def _set_norm(spec, layer_norm) -> None:
    spec.gamma = _array(layer_norm.gamma)
    spec.beta = _array(layer_norm.beta)


def _set_attention(spec, attention, connection, d_model: int, self_attention: bool) -> None:
    q = (attention.query_kernel, attention.query_bias)
    kv = [(attention.key_kernel, attention.key_bias),
          (attention.value_kernel, attention.value_bias)]
    if self_attention:
        _fuse(spec.linear[0], [q, *kv], d_model)
    else:
        _set_linear(spec.linear[0], *q, d_model)
        _fuse(spec.linear[1], kv, d_model)
    _set_linear(spec.linear[-1], attention.output_kernel, attention.output_bias, d_model)
    _set_norm(spec.layer_norm, connection.layer_norm)


def _set_feed_forward(spec, feed_forward, connection, d_model: int) -> None:
    _set_linear(spec.linear_0, feed_forward.inner.kernel, feed_forward.inner.bias, d_model)
    _set_linear(spec.linear_1, feed_forward.outer.kernel, feed_forward.outer.bias,
                feed_forward.d_ff)
    _set_norm(spec.layer_norm, connection.layer_norm)


def position_table(stack, max_positions: int) -> np.ndarray:
    """[max_positions, d_model]: what `stack` (our Encoder or Decoder) adds at positions 0...,
    the first token (source piece or BOS) at 0."""
    from tfformer.model.layers.embedding import sinusoidal_table

    if stack.positional == "learned":
        return _array(stack.positions.position_embeddings)[:max_positions]
    return _array(sinusoidal_table(np.arange(max_positions), stack.d_model,
                                   layout=stack.sinusoid_layout))


def _set_stack_inputs(spec, embedding, stack, max_positions: int) -> None:
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = _array(embedding.embeddings)
    spec.scale_embeddings = True  # E[ids] * sqrt(d_model), as SharedEmbedding
    spec.position_encodings.encodings = position_table(stack, max_positions)
    if stack.final_norm is not None:  # pre-norm
        _set_norm(spec.layer_norm, stack.final_norm)


class Vocabulary:
    """A run's tokens in id order for CTranslate2 (source and target), and how a text becomes
    the tokens CTranslate2 takes: SentencePiece pieces of the run's tokenizer.model, or an
    imported model's (`tfformer.data.marian_pieces`: a language code first, pieces the
    vocabulary lacks as <unk>).

    Args:
        run_dir: the run directory.
        size: the model's vocab_size; source_size: its source vocabulary's.
    """

    def __init__(self, run_dir: str | os.PathLike, size: int, source_size: int | None = None):
        from tfformer.data.pieces import load_pieces

        run = RunDir(run_dir)
        self.files = run.tokenizer_files
        self.pieces = load_pieces(run)
        source, target = self.pieces.source_pieces, self.pieces.target_pieces
        for tokens, limit in ((target, size), (source, source_size or size)):
            if tokens[:4] != [PAD_PIECE, UNK_PIECE, BOS_PIECE, EOS_PIECE]:
                raise ValueError(f"{self.files[0]} has reserved pieces {tokens[:4]}, expected "
                                 f"{[PAD_PIECE, UNK_PIECE, BOS_PIECE, EOS_PIECE]}")
            if len(tokens) > limit:
                raise ValueError(f"{self.files[0]} has {len(tokens)} pieces but the model only "
                                 f"{limit} ids")
        self.source = self._padded(source, source_size or size)
        self.target = self._padded(target, size)

    @staticmethod
    def _padded(tokens: list[str], size: int) -> list[str]:
        """The tokens padded to the model's `size` ids with unused placeholders."""
        return list(tokens) + [f"<tfformer_unused_{i}>" for i in range(len(tokens), size)]

    def source_tokens(self, text: str) -> list[str]:
        return self.pieces.source_tokens(text)

    def source_ids(self, text: str) -> list[int]:
        return self.pieces.encode_source_ids([text])[0]

    def target_ids(self, text: str) -> list[int]:
        return self.pieces.encode([text])[0]

    def target_tokens(self, text: str) -> list[str]:
        return [self.target[i] for i in self.target_ids(text)]


# TransformerConfig.activation -> CTranslate2's.
ACTIVATIONS = {"relu": "RELU", "swish": "SWISH", "gelu": "GELU"}


def model_spec(model, pieces: Sequence[str], max_positions: int | None = None,
               source_pieces: Sequence[str] | None = None):
    """The CTranslate2 TransformerSpec of our Transformer `model`, vocabulary `pieces` (and
    `source_pieces` where the source has its own)."""
    from ctranslate2.specs import common_spec, transformer_spec

    config = model.transformer_config
    if max_positions is None:
        max_positions = (config.max_length if config.positional == "learned"
                         else DEFAULT_MAX_POSITIONS)
    if config.positional == "learned" and max_positions > config.max_length:
        raise ValueError(f"max_positions {max_positions} is more than the model's "
                         f"{config.max_length} learned positions")
    spec = transformer_spec.TransformerSpec.from_config(
        (config.num_encoder_layers, config.num_decoder_layers), config.num_heads,
        pre_norm=config.norm == "pre",
        activation=getattr(common_spec.Activation, ACTIVATIONS[config.activation]))
    d_model = config.d_model
    _set_stack_inputs(spec.encoder, model.source_embedding or model.embedding, model.encoder,
                      max_positions)
    _set_stack_inputs(spec.decoder, model.embedding, model.decoder, max_positions)
    spec.decoder.projection.weight = _array(model.embedding.embeddings)  # tied (§3.4)
    if model.embedding.bias is not None:  # Marian's final logits bias
        spec.decoder.projection.bias = _array(model.embedding.bias)
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder.stack):
        _set_attention(layer_spec.self_attention, layer.self_attention,
                       layer.attention_connection, d_model, self_attention=True)
        _set_feed_forward(layer_spec.ffn, layer.feed_forward, layer.feed_forward_connection,
                          d_model)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder.stack):
        _set_attention(layer_spec.self_attention, layer.self_attention,
                       layer.self_attention_connection, d_model, self_attention=True)
        _set_attention(layer_spec.attention, layer.cross_attention,
                       layer.cross_attention_connection, d_model, self_attention=False)
        _set_feed_forward(layer_spec.ffn, layer.feed_forward, layer.feed_forward_connection,
                          d_model)
    spec.register_source_vocabulary(list(pieces if source_pieces is None else source_pieces))
    spec.register_target_vocabulary(list(pieces))
    spec.config.unk_token, spec.config.bos_token = UNK_PIECE, BOS_PIECE
    spec.config.eos_token, spec.config.decoder_start_token = EOS_PIECE, BOS_PIECE
    spec.config.add_source_bos, spec.config.add_source_eos = False, True
    spec.config.layer_norm_epsilon = float(config.layer_norm_epsilon)
    return spec


def check_quantization(quantization: str | None) -> str:
    """`quantization` if it is one of QUANTIZATIONS ("none" for None); else ValueError."""
    quantization = quantization or "none"
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"unknown quantization {quantization!r}; choose one of "
                         f"{', '.join(QUANTIZATIONS)}")
    return quantization


def check_output_dir(out: str | os.PathLike) -> str:
    """`out` as a path; FileExistsError if it is a file or a directory that is not empty."""
    out = os.fspath(out)
    if os.path.exists(out) and not (os.path.isdir(out) and not os.listdir(out)):
        raise FileExistsError(f"{out} exists and is not an empty directory: choose another "
                              "--out, or remove it")
    return out


def teacher_forced_log_probs(model, source_ids: Sequence[int], target_ids: Sequence[int]):
    """Our model's log P(target_ids[t] | source, target_ids[:t]) for the target + EOS, as
    CTranslate2's `score_batch` returns them: [len(target_ids) + 1] floats."""
    import keras

    from tfformer.special_tokens import BOS_ID, EOS_ID

    source = np.array([list(source_ids) + [EOS_ID]], "int32")
    target_in = np.array([[BOS_ID] + list(target_ids)], "int32")
    logits = keras.ops.convert_to_numpy(model((source, target_in))).astype(np.float64)[0]
    log_probs = logits - logits.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    labels = list(target_ids) + [EOS_ID]
    return log_probs[np.arange(len(labels)), labels]


def check_export(path: str, model, vocabulary: Vocabulary, sentences: Sequence[str],
                 quantization: str) -> float | None:
    """Loads the written model in CTranslate2 and scores `sentences` (each as its own target);
    for float32 weights, returns the largest log-probability difference from our model.

    Raises:
        CTranslate2ExportError: it does not load or translate, or differs by more than
            CHECK_TOLERANCE.
    """
    import ctranslate2

    sources = [vocabulary.source_tokens(s) for s in sentences]
    targets = [vocabulary.target_tokens(s) for s in sentences]
    try:
        translator = ctranslate2.Translator(path, device="cpu", compute_type="default")
        translator.translate_batch(sources, beam_size=1, max_decoding_length=8,
                                   **TRANSLATE_OPTIONS)
        scored = translator.score_batch(sources, targets)
    except (RuntimeError, ValueError) as error:
        raise CTranslate2ExportError(f"CTranslate2 cannot run the written model: {error}") \
            from error
    if quantization not in ("none", "float32"):
        return None
    worst = 0.0
    for sentence, result in zip(sentences, scored):
        ours = teacher_forced_log_probs(model, vocabulary.source_ids(sentence),
                                        vocabulary.target_ids(sentence))
        worst = max(worst, float(np.max(np.abs(np.array(result.log_probs) - ours))))
    if worst > CHECK_TOLERANCE:
        raise CTranslate2ExportError(
            f"CTranslate2's log-probabilities differ from the model's by up to {worst:.3g} "
            f"(tolerance {CHECK_TOLERANCE})")
    return worst


def export_ctranslate2(run_dir: str | os.PathLike, out: str | os.PathLike, *,
                       quantization: str | None = None,
                       weights: str | os.PathLike | None = None,
                       max_positions: int | None = None,
                       check_sentences: Sequence[str] | None = None) -> CTranslate2Export:
    """Writes the run's model as a CTranslate2 model directory `out`, tokenizer.model beside.

    Written in a temporary sibling of `out`, checked there (it loads in CTranslate2 and, with
    float32 weights, reproduces our log-probabilities), then renamed: `out` never holds half a
    model.

    Args:
        run_dir: the training run (tokenizer.model, and model.keras or config.json plus
            checkpoints).
        out: a new (or empty) directory.
        quantization: one of QUANTIZATIONS (default "none": float32 weights).
        weights: a .keras model or a .weights.h5 checkpoint of the run (default: model.keras,
            else the last checkpoint).
        max_positions: rows of the position table, the longest source and output
            (default: 1025, or the learned positions).
        check_sentences: sentences the written model must score like ours (default: the run's
            dev sources, else a few fixed Spanish sentences).

    Raises:
        FileNotFoundError, FileExistsError, ValueError: bad input (nothing written).
        CTranslate2ExportError: the written model failed its check (nothing left at `out`).
    """
    quantization = check_quantization(quantization)
    out = check_output_dir(out)
    run = RunDir(run_dir)
    for path in run.tokenizer_files:  # before the model loads: the cheap error first
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} not found: a run dir needs its tokenizer")
    model, weights = load_model(run.path, weights)
    config = model.transformer_config
    vocabulary = Vocabulary(run.path, config.vocab_size, config.source_vocabulary_size)
    spec = model_spec(model, vocabulary.target, max_positions, vocabulary.source)
    spec.validate()
    spec.optimize(quantization=None if quantization == "none" else quantization)
    if check_sentences is None:
        check_sentences = CHECK_SENTENCES
        if os.path.exists(run.dev_sources):
            with open(run.dev_sources, encoding="utf-8") as f:
                check_sentences = [line.rstrip("\n") for line in f][:16] or CHECK_SENTENCES
    difference = None

    def write(temporary: str) -> None:
        nonlocal difference
        shutil.rmtree(temporary, ignore_errors=True)  # what a killed export left
        os.makedirs(temporary)
        try:
            spec.save(temporary)
            for source in vocabulary.files:  # the SentencePiece model(s) the tokens come from
                if source.endswith((".model", ".spm")):
                    shutil.copyfile(source, os.path.join(temporary, os.path.basename(source)))
            difference = check_export(temporary, model, vocabulary, check_sentences,
                                      quantization)
        except BaseException:
            shutil.rmtree(temporary, ignore_errors=True)
            raise

    atomic_write(out.rstrip(os.sep) or out, write)
    checked = "" if difference is None else \
        f"; its log-probabilities are within {difference:.2g} of the model's"
    logger.info("wrote CTranslate2 model %s (%s weights from %s)%s", out,
                "float32" if quantization == "none" else quantization, weights, checked)
    return CTranslate2Export(out, weights, quantization, difference)
