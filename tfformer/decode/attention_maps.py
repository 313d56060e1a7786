"""Attention weights of one sentence and its translation, with the subword pieces they attend
over: what `tfformer.train.plots` draws as heatmaps.

The weights come from `Transformer.attention_weights` (a teacher-forced pass over the source and
the search's own output tokens), so nothing here changes the graph used to train or serve.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from tfformer.special_tokens import BOS_ID, EOS_ID, PAD_ID

KINDS = ("encoder_self", "decoder_self", "decoder_cross")


@dataclasses.dataclass
class AttentionMaps:
    """The attention weights of one sentence pair.

    Attributes:
        source: the source sentence.
        translation: the target sentence the decoder was fed (the model's own, or given).
        source_pieces: the encoder's positions: the source pieces, then "</s>".
        target_in_pieces: the decoder's inputs: "<s>", then the target pieces.
        target_out_pieces: what each decoder position predicts: the target pieces, then "</s>".
        weights: kind -> float32 [layers, heads, queries, keys], for the kinds in `KINDS`.
    """

    source: str
    translation: str
    source_pieces: list[str]
    target_in_pieces: list[str]
    target_out_pieces: list[str]
    weights: dict[str, np.ndarray]

    def labels(self, kind: str) -> tuple[list[str], list[str]]:
        """(query labels, key labels) of a kind: the pieces on a heatmap's rows and columns.

        A decoder row is labelled with the piece it predicts; its self-attention keys are the
        decoder inputs it may see.
        """
        if kind == "encoder_self":
            return self.source_pieces, self.source_pieces
        if kind == "decoder_self":
            return self.target_out_pieces, self.target_in_pieces
        if kind == "decoder_cross":
            return self.target_out_pieces, self.source_pieces
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")


def _pieces(tokenizer, ids, side: str = "target") -> list[str]:
    names = {BOS_ID: "<s>", EOS_ID: "</s>"}
    # An imported model's source may have a vocabulary of its own.
    piece = getattr(tokenizer, "source_id_to_piece", tokenizer.id_to_piece) \
        if side == "source" else tokenizer.id_to_piece
    return [names.get(int(i)) or piece(int(i)) for i in ids]


def attention_maps(translator, source: str, target: str | None = None) -> AttentionMaps:
    """The attention weights of `source` and its translation, per layer and head.

    Args:
        translator: a `tfformer.decode.translator.Translator` (model, tokenizer and its search).
        source: one source sentence.
        target: the target to feed the decoder; default the translator's own translation
            (its search's tokens, not a re-tokenization of the text).

    Returns:
        AttentionMaps with the pieces of both sides and weights for every kind in `KINDS`.
    """
    model, tokenizer = translator.model, translator.tokenizer
    source_ids = tokenizer.encode_source(tf.constant([source])).to_tensor(default_value=PAD_ID)
    if target is None:
        tokens = [int(t) for t in translator.search(source_ids).tokens[0, 0].numpy()
                  if t != PAD_ID]
        pieces = tokens[:tokens.index(EOS_ID)] if EOS_ID in tokens else tokens
        translation = tokenizer.detokenize(tf.constant(pieces + [EOS_ID], tf.int32))
        translation = translation.numpy().decode("utf-8")
    else:
        pieces = [int(t) for t in tokenizer.tokenize(tf.constant([target]))[0].numpy()]
        translation = target
    target_in = [BOS_ID] + pieces
    target_out = pieces + [EOS_ID]
    weights = model.attention_weights(source_ids, tf.constant([target_in], tf.int32))
    return AttentionMaps(
        source=source, translation=translation,
        source_pieces=_pieces(tokenizer, source_ids[0].numpy(), "source"),
        target_in_pieces=_pieces(tokenizer, target_in),
        target_out_pieces=_pieces(tokenizer, target_out),
        weights={kind: np.stack([w[0].numpy().astype(np.float32) for w in layers])
                 for kind, layers in weights.items()})
