"""The model's architecture (`TransformerConfig`: what the weights depend on) and its decoding
settings (`DecodingConfig`: chosen at translate or export time).

The paper's numbers live in the presets (Vaswani et al. 2017, Table 3) and in the dataclasses'
defaults. Training settings (label smoothing, warmup, batch tokens, ...) belong to a run:
`tfformer.train.settings.TrainSettings`.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from tfformer.utils.checks import check_at_least, check_fraction, check_non_negative

POSITIONAL_CHOICES = ("sinusoidal", "learned")
NORM_CHOICES = ("post", "pre")
ACTIVATION_CHOICES = ("relu", "swish", "gelu")
SINUSOID_CHOICES = ("interleaved", "halves")
LENGTH_PENALTY_FORMS = ("gnmt", "power")
# Learning-rate schedules (`tfformer.model.schedule`): the paper's, and those of continued training.
LR_SCHEDULES = ("noam", "inverse_sqrt", "constant")
PAPER_WARMUP_STEPS = 4000  # updates of linear warmup of the Noam schedule (§5.3)
# Fields of TransformerConfig that only act during training.
TRAINING_ONLY = ("dropout", "attention_dropout")
# Fields that configs written before the architecture/training/decoding split carried.
LEGACY_FIELDS = ("label_smoothing", "warmup_steps", "beam_size", "length_penalty",
                 "max_output_extra")


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters of the Transformer, with the paper's base model as defaults.

    Args:
        vocab_size: size of the one shared source/target vocabulary (§5.1), reserved ids included;
            with `source_vocab_size`, the target's alone.
        d_model: width of every sub-layer output and of the embeddings (§3).
        num_heads: h, the number of attention heads; d_k = d_v = d_model / h (§3.2.2).
        d_ff: inner width of the position-wise feed-forward network (§3.3).
        num_encoder_layers: N for the encoder stack (§3.1).
        num_decoder_layers: N for the decoder stack (§3.1).
        dropout: P_drop on sub-layer outputs and on embeddings + positions (§5.4).
        attention_dropout: dropout on the attention weights (0 in the paper).
        max_length: longest sequence (in tokens, BOS/EOS included) the model accepts.
        positional: "sinusoidal" (§3.5) or "learned" (the paper's Table 3 row E).
        share_embeddings: one matrix for source embedding, target embedding and the pre-softmax
            projection (§3.4). When False, the source gets its own matrix and the target embedding
            stays tied to the pre-softmax projection.
        norm: "post" is the paper's LayerNorm(x + Sublayer(x)); "pre" is x + Sublayer(LayerNorm(x))
            with a final LayerNorm after each stack.
        layer_norm_epsilon: epsilon of every LayerNorm.
        activation: the feed-forward network's activation: "relu" (§3.3, eq. 2), "swish"
            (x * sigmoid(x), Marian's and OPUS-MT's) or "gelu" (the exact, erf form).
        sinusoid_layout: where §3.5's sines and cosines go: "interleaved" (the paper's: sin in
            even columns, cos in odd) or "halves" (all sines, then all cosines: Marian's,
            tensor2tensor's and CTranslate2's).
        final_logits_bias: a learned bias added to the logits (Marian's `final_logits_bias`).
        source_vocab_size: 0 (the paper's): the source shares the target's vocabulary. Else the
            size of the source's own vocabulary and embedding (needs share_embeddings false).
        bos_in_softmax: whether the training loss's softmax (and its label smoothing) counts
            the BOS id, as the paper's whole-vocabulary softmax does. False for an imported
            Marian model, whose BOS is a copy of its decoder start `<pad>`, which Marian's
            softmax counts once (as our PAD). No search ever produces BOS either way.

    Dropout is kept here because the layers hold it, but it does not change what the weights
    mean: `weight_differences` (what a resumed run must not change) leaves it out.
    """

    vocab_size: int = 37000
    d_model: int = 512
    num_heads: int = 8
    d_ff: int = 2048
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    dropout: float = 0.1
    attention_dropout: float = 0.0
    max_length: int = 256
    positional: str = "sinusoidal"
    share_embeddings: bool = True
    norm: str = "post"
    layer_norm_epsilon: float = 1e-6
    activation: str = "relu"
    sinusoid_layout: str = "interleaved"
    final_logits_bias: bool = False
    source_vocab_size: int = 0
    bos_in_softmax: bool = True

    def __post_init__(self) -> None:
        self.validate()

    @property
    def d_k(self) -> int:
        """Per-head width of queries, keys and values (§3.2.2: d_k = d_v = d_model / h)."""
        return self.d_model // self.num_heads

    @property
    def source_vocabulary_size(self) -> int:
        """The number of source ids: `source_vocab_size`, or the shared `vocab_size`."""
        return self.source_vocab_size or self.vocab_size

    def differences(self, other: "TransformerConfig") -> list[str]:
        """`field: A -> B` for every field whose value differs from `other`'s."""
        return [f"{f.name}: {getattr(self, f.name)!r} -> {getattr(other, f.name)!r}"
                for f in dataclasses.fields(self)
                if getattr(self, f.name) != getattr(other, f.name)]

    def weight_differences(self, other: "TransformerConfig") -> list[str]:
        """`differences` that change what the weights mean (all but dropout rates)."""
        return [d for d in self.differences(other) if d.split(":")[0] not in TRAINING_ONLY]

    def validate(self) -> None:
        """Raises ValueError naming the first field whose value is invalid."""
        for name, field_type in (
            ("vocab_size", int), ("d_model", int), ("num_heads", int), ("d_ff", int),
            ("num_encoder_layers", int), ("num_decoder_layers", int), ("max_length", int),
            ("source_vocab_size", int),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, field_type):
                raise ValueError(f"{name} must be an integer, got {value!r}")
        for name in ("d_model", "num_heads", "d_ff", "num_encoder_layers",
                     "num_decoder_layers"):
            check_at_least(name, getattr(self, name))
        check_at_least("vocab_size", self.vocab_size, 5, "4 reserved ids plus one piece")
        check_at_least("max_length", self.max_length, 2, "BOS and EOS")
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})")
        for name in ("dropout", "attention_dropout"):
            check_fraction(name, getattr(self, name))
        check_non_negative("layer_norm_epsilon", self.layer_norm_epsilon)
        if self.positional not in POSITIONAL_CHOICES:
            raise ValueError(
                f"positional must be one of {POSITIONAL_CHOICES}, got {self.positional!r}")
        if self.norm not in NORM_CHOICES:
            raise ValueError(f"norm must be one of {NORM_CHOICES}, got {self.norm!r}")
        for name in ("share_embeddings", "final_logits_bias", "bos_in_softmax"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name, choices in (("activation", ACTIVATION_CHOICES),
                              ("sinusoid_layout", SINUSOID_CHOICES)):
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} must be one of {choices}, got {getattr(self, name)!r}")
        if self.source_vocab_size:
            check_at_least("source_vocab_size", self.source_vocab_size, 5,
                           "4 reserved ids plus one piece, or 0: the shared vocabulary")
            if self.share_embeddings:
                raise ValueError("source_vocab_size needs share_embeddings false: one matrix "
                                 "cannot embed two vocabularies")
        else:
            check_at_least("source_vocab_size", self.source_vocab_size, 0)

    def replace(self, **overrides: Any) -> "TransformerConfig":
        """Returns a copy with `overrides` applied; unknown names raise ValueError."""
        return TransformerConfig.from_dict({**self.to_dict(), **overrides})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "TransformerConfig":
        # Configs saved before the split (config.json, .keras) carry training and decoding
        # settings too: they do not describe the weights, and are dropped.
        values = {k: v for k, v in values.items() if k not in LEGACY_FIELDS}
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown config field(s) {unknown}; known fields: {sorted(known)}")
        return cls(**values)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "TransformerConfig":
        try:
            values = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"config is not valid JSON: {error}") from None
        if not isinstance(values, dict):
            raise ValueError(f"config JSON must be an object, got {type(values).__name__}")
        return cls.from_dict(values)


@dataclasses.dataclass(frozen=True)
class DecodingConfig:
    """How to translate (§6.1); chosen at translate or export time, not saved with the model.

    Args:
        beam_size: k, the beam width; 1 means greedy search.
        length_penalty: alpha of the length penalty.
        length_penalty_form: "gnmt", lp(Y) = ((5 + |Y|) / 6) ** alpha (§6.1, Wu et al. 2016), or
            "power", lp(Y) = |Y| ** alpha (Hugging Face's generate and fairseq's); |Y| counts
            the generated tokens, EOS included.
        max_output_extra: maximum output length = input length + this.
        no_repeat_ngram: n > 0 forbids any n-gram of n pieces twice in a hypothesis (0: off,
            the paper's search).
    """

    beam_size: int = 4
    length_penalty: float = 0.6
    max_output_extra: int = 50
    no_repeat_ngram: int = 0
    length_penalty_form: str = "gnmt"

    def __post_init__(self) -> None:
        for name in ("beam_size", "max_output_extra", "no_repeat_ngram"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an integer, got {value!r}")
        check_at_least("beam_size", self.beam_size)
        check_at_least("max_output_extra", self.max_output_extra, 0)
        check_at_least("no_repeat_ngram", self.no_repeat_ngram, 0)
        check_non_negative("length_penalty", self.length_penalty)
        if self.length_penalty_form not in LENGTH_PENALTY_FORMS:
            raise ValueError(f"length_penalty_form must be one of {LENGTH_PENALTY_FORMS}, got "
                             f"{self.length_penalty_form!r}")


# Paper Table 3. `tiny` is ours: small enough to train on a 2-core CPU in minutes.
PRESETS: dict[str, TransformerConfig] = {
    "tiny": TransformerConfig(
        vocab_size=8000, d_model=128, num_heads=4, d_ff=512, num_encoder_layers=2,
        num_decoder_layers=2, dropout=0.1),
    "base": TransformerConfig(),
    "big": TransformerConfig(d_model=1024, num_heads=16, d_ff=4096, dropout=0.3),
}


def get_preset(name: str, **overrides: Any) -> TransformerConfig:
    """Returns the named preset with `overrides` applied."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return PRESETS[name].replace(**overrides) if overrides else PRESETS[name]
