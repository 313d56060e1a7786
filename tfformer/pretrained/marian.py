"""A Hugging Face Marian (OPUS-MT) directory as a tfformer run directory.

    DIR/{config.json, model.safetensors | pytorch_model.bin, source.spm, target.spm, vocab.json
         [, target_vocab.json], tokenizer_config.json, generation_config.json}
    -> RUN/{config.json, model.keras, vocabulary.json, source.spm, target.spm, pretrained.json}

Marian's Transformer is the paper's (post-LN, sinusoids, embeddings tied and scaled by
sqrt(d_model)) with a few settings of its own, each a `TransformerConfig` field: the
feed-forward activation (swish in OPUS-MT), the sinusoid layout (sines, then cosines), a final
logits bias, LayerNorm epsilon 1e-5, and maybe separate source and target vocabularies.

Its special ids differ from tfformer's (`</s>` 0, `<unk>` 1, `<pad>` last, and decoding starts
from `<pad>`). The import renumbers the vocabulary instead of teaching every search, the export
and the CTranslate2 export other ids: `marian_ids` gives the Marian id of each tfformer id,
PAD -> `<pad>`, UNK -> `<unk>`, EOS -> `</s>`, BOS -> the decoder start (its embedding row,
copied), then Marian's other ids in their order. The embedding rows and the logits bias are
permuted alike, so the model computes Marian's logits for the same pieces.

Weights are read with `safetensors` into NumPy (neither torch nor transformers is needed); a
`pytorch_model.bin` needs torch. Anything else is refused with a ValueError naming the field or
file and what is supported.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import time
from typing import Any, Callable

import numpy as np

from tfformer.config import TransformerConfig
from tfformer.data.marian_pieces import MarianPieces
from tfformer.special_tokens import BOS_ID, BOS_PIECE, EOS_ID, NUM_RESERVED, PAD_ID, UNK_ID
from tfformer.utils.files import atomic_write, atomic_write_text, sha256_of
from tfformer.utils.run_dir import RunDir

logger = logging.getLogger(__name__)

MODEL_TYPE = "marian"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# config.json's activation_function -> TransformerConfig.activation.
ACTIVATIONS = {"relu": "relu", "swish": "swish", "silu": "swish", "gelu": "gelu"}
# Marian's special pieces: MarianTokenizer's defaults, which tokenizer_config.json may rename.
SPECIAL_DEFAULTS = {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
# Settings of training alone that tfformer's layers do not have: refused unless 0.
UNSUPPORTED_WHEN_NOT_ZERO = ("activation_dropout", "encoder_layerdrop", "decoder_layerdrop")
# LayerNorm's epsilon in Hugging Face's Marian (torch.nn.LayerNorm's default).
LAYER_NORM_EPSILON = 1e-5


@dataclasses.dataclass
class ImportResult:
    run_dir: str
    config: TransformerConfig
    weights: str  # the file the weights came from
    seconds: float


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(values, dict):
        raise ValueError(f"{path} must hold a JSON object")
    return values


def _require(directory: str, name: str, why: str = "") -> str:
    path = os.path.join(directory, name)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} not found: a Marian directory needs {name}"
                                + (f" ({why})" if why else ""))
    return path


def marian_ids(vocabulary: dict[str, int], specials: dict[str, str],
               decoder_start_id: int) -> np.ndarray:
    """int64 [len(vocabulary) + 1]: the Marian id of each tfformer id (module docstring).

    Args:
        vocabulary: vocab.json (piece -> Marian id), ids 0 ... N - 1.
        specials: {"eos_token", "unk_token", "pad_token"} -> their pieces.
        decoder_start_id: the Marian id decoding starts from (BOS's row).
    """
    ids = {name: vocabulary[piece] for name, piece in specials.items()}
    reserved = {PAD_ID: ids["pad_token"], UNK_ID: ids["unk_token"], BOS_ID: decoder_start_id,
                EOS_ID: ids["eos_token"]}
    special = {ids["pad_token"], ids["unk_token"], ids["eos_token"]}
    rest = [i for i in range(len(vocabulary)) if i not in special]
    return np.array([reserved[i] for i in range(NUM_RESERVED)] + rest, np.int64)


def _check_vocabulary(path: str, vocabulary: dict, specials: dict[str, str],
                      expected_size: int, size_field: str) -> None:
    for name, piece in specials.items():
        if piece not in vocabulary:
            raise ValueError(f"{path} lacks the {name} {piece!r}")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in vocabulary.values()):
        raise ValueError(f"{path} must map each piece to an integer id")
    if sorted(vocabulary.values()) != list(range(len(vocabulary))):
        raise ValueError(f"{path}: the ids must be 0 ... {len(vocabulary) - 1}, each once")
    if len(vocabulary) != expected_size:
        raise ValueError(f"{path} has {len(vocabulary)} pieces but config.json's {size_field} "
                         f"is {expected_size}: the vocabulary and the model disagree")


def _pieces(vocabulary: dict[str, int], order: np.ndarray, specials: dict[str, str]) -> list:
    """The piece of each tfformer id, given the Marian id of each (`marian_ids`)."""
    piece_of = {i: p for p, i in vocabulary.items()}
    pieces = [piece_of[int(i)] for i in order]
    pieces[PAD_ID], pieces[UNK_ID] = specials["pad_token"], specials["unk_token"]
    pieces[EOS_ID] = specials["eos_token"]
    # BOS has no piece of Marian's; the name must not be one of its pieces.
    pieces[BOS_ID] = BOS_PIECE if BOS_PIECE not in vocabulary else "<tfformer_bos>"
    return pieces


def read_weights(directory: str) -> tuple[dict[str, np.ndarray], str]:
    """(name -> float32 array, the file read): model.safetensors with `safetensors` (NumPy),
    else pytorch_model.bin with torch."""
    safetensors_path = os.path.join(directory, WEIGHT_FILES[0])
    if os.path.isfile(safetensors_path):
        from safetensors.numpy import load_file

        try:
            tensors = load_file(safetensors_path)
        except Exception as error:  # safetensors raises its own SafetensorError
            raise ValueError(f"{safetensors_path} cannot be read: {error}") from None
        return {k: np.asarray(v, np.float32) for k, v in tensors.items()}, safetensors_path
    bin_path = os.path.join(directory, WEIGHT_FILES[1])
    if not os.path.isfile(bin_path):
        raise FileNotFoundError(f"{directory} has no weights: a Marian directory needs "
                                f"{' or '.join(WEIGHT_FILES)}")
    try:
        import torch
    except ImportError:
        raise ValueError(f"{bin_path} is a PyTorch file, which needs torch: pip install torch "
                         "(or save the model as model.safetensors)") from None
    state = torch.load(bin_path, map_location="cpu", weights_only=True)
    return {k: v.float().numpy() for k, v in state.items()}, bin_path


def transformer_config(hf: dict, vocab_size: int, source_vocab_size: int) -> TransformerConfig:
    """The TransformerConfig of a Marian config.json (tfformer's sizes: one id more than
    Marian's, BOS). Raises ValueError naming a field tfformer does not support."""
    def field(name, default=None):
        if name not in hf and default is None:
            raise ValueError(f"config.json lacks {name}")
        return hf.get(name, default)

    if hf.get("model_type") != MODEL_TYPE:
        raise ValueError(f"config.json's model_type is {hf.get('model_type')!r}; tfformer-import "
                         f"reads {MODEL_TYPE!r} (Hugging Face's Marian, OPUS-MT's models)")
    if hf.get("normalize_before", False):
        raise ValueError("config.json's normalize_before is true (pre-LN): tfformer-import reads "
                         "Marian's post-LN models only")
    if not hf.get("scale_embedding", False):
        raise ValueError("config.json's scale_embedding is false: tfformer's embeddings are "
                         "scaled by sqrt(d_model) (§3.4), as OPUS-MT's (scale_embedding true)")
    if not hf.get("tie_word_embeddings", True):
        raise ValueError("config.json's tie_word_embeddings is false: tfformer's pre-softmax "
                         "projection is the target embedding (§3.4)")
    for name in UNSUPPORTED_WHEN_NOT_ZERO:
        if hf.get(name, 0):
            raise ValueError(f"config.json's {name} is {hf[name]}: tfformer supports 0 only")
    for encoder, decoder in (("encoder_attention_heads", "decoder_attention_heads"),
                             ("encoder_ffn_dim", "decoder_ffn_dim")):
        if field(encoder) != field(decoder):
            raise ValueError(f"config.json's {encoder} ({hf[encoder]}) and {decoder} "
                             f"({hf[decoder]}) differ: tfformer's stacks share their widths")
    activation = field("activation_function")
    if activation not in ACTIVATIONS:
        raise ValueError(f"config.json's activation_function {activation!r} is not supported; "
                         f"supported: {sorted(ACTIVATIONS)}")
    shared = bool(hf.get("share_encoder_decoder_embeddings", True))
    try:
        return TransformerConfig(
            vocab_size=vocab_size, d_model=field("d_model"),
            num_heads=field("encoder_attention_heads"), d_ff=field("encoder_ffn_dim"),
            num_encoder_layers=field("encoder_layers"), num_decoder_layers=field("decoder_layers"),
            dropout=float(hf.get("dropout", 0.1)),
            attention_dropout=float(hf.get("attention_dropout", 0.0)),
            max_length=field("max_position_embeddings"), share_embeddings=shared,
            layer_norm_epsilon=LAYER_NORM_EPSILON, activation=ACTIVATIONS[activation],
            sinusoid_layout="halves", final_logits_bias=True, bos_in_softmax=False,
            source_vocab_size=0 if source_vocab_size == vocab_size else source_vocab_size)
    except ValueError as error:
        raise ValueError(f"config.json: {error}") from None


def _take(weights: dict, name: str) -> np.ndarray:
    if name not in weights:
        raise ValueError(f"the weights lack {name}")
    return weights[name]


def _embedding(weights: dict, side: str, shared: bool) -> np.ndarray:
    """The Marian embedding matrix of `side` ("encoder" or "decoder")."""
    names = ["model.shared.weight"] if shared else []
    names += [f"model.{side}.embed_tokens.weight"]
    if side == "decoder":
        names.append("lm_head.weight")  # tied to it
    for name in names:
        if name in weights:
            return weights[name]
    raise ValueError(f"the weights lack the {side} embedding ({' or '.join(names)})")


def set_weights(model, weights: dict, source_order: np.ndarray, target_order: np.ndarray
                ) -> None:
    """Copies Marian's weights (Hugging Face's names, PyTorch's [out, in] layout) into our built
    `model`, the vocabulary rows in tfformer's order."""
    config = model.transformer_config
    d, h = config.d_model, config.num_heads
    target_embedding = _embedding(weights, "decoder", config.share_embeddings)
    model.embedding.embeddings.assign(target_embedding[target_order])
    bias = weights.get("final_logits_bias", np.zeros((1, len(target_embedding)), np.float32))
    model.embedding.bias.assign(bias.reshape(-1)[target_order])
    if model.source_embedding is not None:
        model.source_embedding.embeddings.assign(
            _embedding(weights, "encoder", False)[source_order])

    def attention(ours, prefix):
        for name, kernel, ours_bias in (("q_proj", ours.query_kernel, ours.query_bias),
                                        ("k_proj", ours.key_kernel, ours.key_bias),
                                        ("v_proj", ours.value_kernel, ours.value_bias)):
            kernel.assign(_take(weights, f"{prefix}.{name}.weight").T.reshape(d, h, d // h))
            ours_bias.assign(_take(weights, f"{prefix}.{name}.bias").reshape(h, d // h))
        ours.output_kernel.assign(
            _take(weights, f"{prefix}.out_proj.weight").T.reshape(h, d // h, d))
        ours.output_bias.assign(_take(weights, f"{prefix}.out_proj.bias"))

    def norm(connection, prefix):
        connection.layer_norm.gamma.assign(_take(weights, f"{prefix}.weight"))
        connection.layer_norm.beta.assign(_take(weights, f"{prefix}.bias"))

    def feed_forward(ours, prefix):
        ours.inner.kernel.assign(_take(weights, f"{prefix}.fc1.weight").T)
        ours.inner.bias.assign(_take(weights, f"{prefix}.fc1.bias"))
        ours.outer.kernel.assign(_take(weights, f"{prefix}.fc2.weight").T)
        ours.outer.bias.assign(_take(weights, f"{prefix}.fc2.bias"))

    for i, layer in enumerate(model.encoder.stack):
        prefix = f"model.encoder.layers.{i}"
        attention(layer.self_attention, f"{prefix}.self_attn")
        norm(layer.attention_connection, f"{prefix}.self_attn_layer_norm")
        feed_forward(layer.feed_forward, prefix)
        norm(layer.feed_forward_connection, f"{prefix}.final_layer_norm")
    for i, layer in enumerate(model.decoder.stack):
        prefix = f"model.decoder.layers.{i}"
        attention(layer.self_attention, f"{prefix}.self_attn")
        norm(layer.self_attention_connection, f"{prefix}.self_attn_layer_norm")
        attention(layer.cross_attention, f"{prefix}.encoder_attn")
        norm(layer.cross_attention_connection, f"{prefix}.encoder_attn_layer_norm")
        feed_forward(layer.feed_forward, prefix)
        norm(layer.feed_forward_connection, f"{prefix}.final_layer_norm")


@dataclasses.dataclass
class MarianDirectory:
    """What a Marian directory holds, read and checked (`read_marian`)."""

    path: str
    hf_config: dict[str, Any]
    generation_config: dict[str, Any]
    pieces: MarianPieces
    source_order: np.ndarray  # the Marian id of each tfformer source id
    target_order: np.ndarray  # ... and target id
    config: TransformerConfig
    files: list[str]


def read_marian(directory: str | os.PathLike) -> MarianDirectory:
    """Reads and checks a Marian directory's configuration and vocabulary (not its weights).

    Raises:
        FileNotFoundError: naming a missing file.
        ValueError: naming the field or file that tfformer does not support.
    """
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"no directory {directory}")
    config_path = _require(directory, "config.json")
    hf = _read_json(config_path)
    tokenizer_config_path = os.path.join(directory, "tokenizer_config.json")
    tokenizer_config = _read_json(tokenizer_config_path) \
        if os.path.isfile(tokenizer_config_path) else {}
    generation_path = os.path.join(directory, "generation_config.json")
    generation = _read_json(generation_path) if os.path.isfile(generation_path) else {}
    specials = {}
    for name, default in SPECIAL_DEFAULTS.items():
        value = tokenizer_config.get(name, default)
        specials[name] = value.get("content") if isinstance(value, dict) else value
    separate = bool(tokenizer_config.get("separate_vocabs", False))
    files = [config_path]
    source_spm = _require(directory, "source.spm")
    target_spm = _require(directory, "target.spm")
    vocab_path = _require(directory, "vocab.json")
    files += [source_spm, target_spm, vocab_path]
    vocabulary = _read_json(vocab_path)
    shared_embeddings = bool(hf.get("share_encoder_decoder_embeddings", True))
    if separate and shared_embeddings:
        raise ValueError("tokenizer_config.json's separate_vocabs is true but config.json's "
                         "share_encoder_decoder_embeddings is true: one embedding cannot hold "
                         "two vocabularies")
    vocab_size = hf.get("vocab_size")
    _check_vocabulary(vocab_path, vocabulary, specials, vocab_size, "vocab_size")
    if separate:
        target_vocab_path = _require(directory, "target_vocab.json",
                                     "tokenizer_config.json's separate_vocabs is true")
        files.append(target_vocab_path)
        target_vocabulary = _read_json(target_vocab_path)
        _check_vocabulary(target_vocab_path, target_vocabulary, specials,
                          hf.get("decoder_vocab_size") or vocab_size, "decoder_vocab_size")
    else:
        target_vocabulary = vocabulary
        decoder_size = hf.get("decoder_vocab_size")
        if decoder_size not in (None, vocab_size):
            raise ValueError(f"config.json's decoder_vocab_size ({decoder_size}) differs from "
                             f"vocab_size ({vocab_size}), but there is no target_vocab.json "
                             "(tokenizer_config.json's separate_vocabs)")
    for name in ("pad_token_id", "eos_token_id"):
        piece = specials[name.replace("_id", "")]
        if name in hf and hf[name] != target_vocabulary[piece]:
            raise ValueError(f"config.json's {name} ({hf[name]}) is not the id of {piece!r} in "
                             f"the target vocabulary ({target_vocabulary[piece]})")
    start = hf.get("decoder_start_token_id", target_vocabulary[specials["pad_token"]])
    if not isinstance(start, int) or not 0 <= start < len(target_vocabulary):
        raise ValueError(f"config.json's decoder_start_token_id {start!r} is not a target id")
    target_order = marian_ids(target_vocabulary, specials, start)
    source_order = target_order if not separate else marian_ids(
        vocabulary, specials, vocabulary[specials["pad_token"]])
    with open(source_spm, "rb") as f, open(target_spm, "rb") as g:
        pieces = MarianPieces(
            f.read(), g.read(), _pieces(vocabulary, source_order, specials),
            _pieces(target_vocabulary, target_order, specials) if separate else None)
    config = transformer_config(hf, len(target_order), len(source_order))
    return MarianDirectory(directory, hf, generation, pieces, source_order, target_order,
                           config, files)


def import_marian(directory: str | os.PathLike, out: str | os.PathLike, *,
                  progress: Callable[[str], None] | None = None) -> ImportResult:
    """Writes the Marian directory `directory` as the run directory `out` (new or empty).

    Written in a temporary sibling and renamed: `out` never holds half a run.

    Args:
        directory: a Hugging Face Marian directory (module docstring), as
            `huggingface-cli download Helsinki-NLP/opus-mt-es-en --local-dir DIR` writes it.
        out: the run directory to write.
        progress: called with a line at each stage (reading, mapping, writing).

    Raises:
        FileNotFoundError, FileExistsError, ValueError: bad input (nothing written).
    """
    from tfformer.model.transformer import Transformer

    started = time.monotonic()
    say = progress or (lambda line: None)
    out = os.fspath(out).rstrip(os.sep) or os.fspath(out)
    if os.path.exists(out) and not (os.path.isdir(out) and not os.listdir(out)):
        raise FileExistsError(f"{out} exists and is not an empty directory: choose another "
                              "--out, or remove it")
    say(f"reading {directory}")
    marian = read_marian(directory)
    weights, weights_path = read_weights(marian.path)
    marian.files.append(weights_path)
    config = marian.config
    say(f"read {len(weights)} tensors from {weights_path}; mapping them onto a "
        f"{config.num_encoder_layers}+{config.num_decoder_layers}-layer Transformer "
        f"(d_model {config.d_model}, {config.vocab_size} target ids)")
    model = Transformer(config)
    model.build()
    set_weights(model, weights, marian.source_order, marian.target_order)
    del weights
    record = {
        "format": MODEL_TYPE, "source": os.path.abspath(marian.path),
        "files": {os.path.basename(p): sha256_of(p) for p in marian.files},
        "ids": "tfformer's: PAD, UNK, BOS, EOS = 0, 1, 2, 3; BOS is the decoder start "
               f"(Marian id {int(marian.target_order[BOS_ID])}); the other Marian ids follow "
               "in their order",
        "hf_config": marian.hf_config, "generation_config": marian.generation_config,
    }

    def write(temporary: str) -> None:
        shutil.rmtree(temporary, ignore_errors=True)  # what a killed import left
        os.makedirs(temporary)
        try:
            run = RunDir(temporary)
            say(f"writing {out}")
            atomic_write_text(run.config, config.to_json())
            marian.pieces.save(run)
            model.save(run.model)
            atomic_write_text(run.pretrained, json.dumps(record, indent=2, ensure_ascii=False))
        except BaseException:
            shutil.rmtree(temporary, ignore_errors=True)
            raise

    atomic_write(out, write)
    seconds = time.monotonic() - started
    logger.info("imported %s into %s in %.1f s", marian.path, out, seconds)
    return ImportResult(out, config, weights_path, seconds)
