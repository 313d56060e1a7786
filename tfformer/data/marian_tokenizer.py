"""An imported Marian model's tokenizer in the TensorFlow graph, savable in a SavedModel.

The rules are `tfformer.data.marian_pieces`' (Hugging Face's MarianTokenizer's); this module
runs them with tf-text's SentencePiece ops and lookup tables (core TF ops), so that the export
tokenizes and detokenizes inside the SavedModel as it does for a tfformer-trained model. It has
the methods of `tfformer.data.tokenizer.Tokenizer` that translation uses.
"""

from __future__ import annotations

import hashlib
import os

import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.python.ops import sentencepiece_tokenizer as tf_text_sentencepiece

from tfformer.data.marian_pieces import MarianPieces
from tfformer.data.tokenizer import _append_column, text_ids
from tfformer.special_tokens import BOS_ID, EOS_ID, NUM_RESERVED, PAD_ID, UNK_ID
from tfformer.utils.run_dir import RunDir

# RE2 (tf.strings): a language code as MarianTokenizer finds it, ">>" up to the first "<<".
_CODE = r"(?s)^(>>.*?<<)"


class _SharedNameModelResource(tf_text_sentencepiece._SentencepieceModelResource):
    """tf-text's SentencePiece model resource, created under a name of its own. tf-text creates
    every model's resource with the same (empty) shared name: in a reloaded SavedModel, two
    SentencePiece models then resolve to one resource, and both sides tokenize with the same
    model. Named by a hash of the model, each model keeps its own."""

    def _create_resource(self):
        name = "tfformer_sentencepiece_" + hashlib.sha256(self._model).hexdigest()[:16]
        with tf.name_scope(self._name or "SentenceTokenizerInitializer"):
            return tf_text_sentencepiece.gen_sentencepiece_tokenizer.sentencepiece_op(
                model=self._model, shared_name=name)


def _sentencepiece(model: bytes) -> tf_text.SentencepieceTokenizer:
    """A tf-text SentencePiece tokenizer of string pieces whose resource is its own."""
    tokenizer = tf_text.SentencepieceTokenizer(model=model, out_type=tf.string)
    tokenizer._model_resource = _SharedNameModelResource(model, None)
    return tokenizer


def _piece_table(pieces: list[str]) -> tf.lookup.StaticHashTable:
    """piece -> id for the pieces past the reserved ids; <unk> for any other string."""
    return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
        tf.constant(pieces[NUM_RESERVED:], tf.string),
        tf.range(NUM_RESERVED, len(pieces), dtype=tf.int32)), default_value=UNK_ID)


class MarianTokenizer(tf.Module):
    """Source text to ids and target ids to text, with two SentencePiece models and tfformer's
    ids (see `tfformer.data.marian_pieces`).

    Args:
        pieces: the `MarianPieces` of the run.
        name: name of the tf.Module.
    """

    def __init__(self, pieces: MarianPieces, name: str = "tokenizer"):
        super().__init__(name=name)
        self.pieces = pieces
        self.source_sentencepiece = _sentencepiece(pieces.source_model)
        self.target_sentencepiece = _sentencepiece(pieces.target_model)
        self.source_table = _piece_table(pieces.source_pieces)
        self.target_table = self.source_table if pieces.shared else \
            _piece_table(pieces.target_pieces)
        # Decoding joins each kept id's surface (`MarianPieces.surfaces`).
        self.surface_table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
            tf.range(len(pieces.target_pieces), dtype=tf.int32),
            tf.constant(pieces.surfaces(), tf.string)), default_value="")

    @classmethod
    def from_dir(cls, run_dir: str | os.PathLike | RunDir) -> "MarianTokenizer":
        """Loads an imported run's vocabulary.json, source.spm and target.spm."""
        return cls(MarianPieces.from_dir(run_dir))

    @property
    def vocab_size(self) -> int:
        """Number of target ids (the model's vocab_size)."""
        return self.pieces.vocab_size

    @property
    def source_vocab_size(self) -> int:
        return self.pieces.source_vocab_size

    def id_to_piece(self, token_id: int) -> str:
        """The target piece of `token_id`."""
        if not 0 <= token_id < self.vocab_size:
            raise ValueError(f"token id {token_id} is outside [0, {self.vocab_size})")
        return self.pieces.id_to_piece(token_id)

    def source_id_to_piece(self, token_id: int) -> str:
        """The source piece of `token_id`."""
        if not 0 <= token_id < self.source_vocab_size:
            raise ValueError(f"token id {token_id} is outside [0, {self.source_vocab_size})")
        return self.pieces.source_pieces[token_id]

    # -- graph ops ---------------------------------------------------------------------------

    def tokenize_source(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """Source ids, a language code first where a text starts with one, no EOS.

        Args:
            strings: tf.string tensor [batch].

        Returns:
            int32 RaggedTensor [batch, (pieces)].
        """
        strings = tf.convert_to_tensor(strings, dtype=tf.string)
        has_code = tf.strings.regex_full_match(strings, _CODE + ".*")
        codes = tf.strings.regex_replace(strings, _CODE + ".*", r"\1")
        rest = tf.where(has_code, tf.strings.regex_replace(strings, _CODE, ""), strings)
        pieces = self.source_sentencepiece.tokenize(rest)
        ids = tf.ragged.map_flat_values(self.source_table.lookup, pieces)
        code_ids = tf.RaggedTensor.from_row_lengths(
            self.source_table.lookup(tf.boolean_mask(codes, has_code)),
            tf.cast(has_code, tf.int64))
        return tf.concat([tf.cast(code_ids, tf.int32), ids], axis=1)

    def tokenize(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """Target ids of each text (a forced prefix), with no BOS/EOS: int32 [batch, (pieces)]."""
        strings = tf.convert_to_tensor(strings, dtype=tf.string)
        return tf.ragged.map_flat_values(self.target_table.lookup,
                                         self.target_sentencepiece.tokenize(strings))

    def encode_source(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """Encoder input ids: (code +) pieces + [EOS], int32 RaggedTensor [batch, (len)]."""
        return _append_column(self.tokenize_source(strings), EOS_ID)

    def encode_target(self, strings: tf.Tensor) -> tuple[tf.RaggedTensor, tf.RaggedTensor]:
        """Decoder input and labels for teacher forcing: ([BOS] + pieces, pieces + [EOS])."""
        pieces = self.tokenize(strings)
        return _append_column(pieces, BOS_ID, first=True), _append_column(pieces, EOS_ID)

    def detokenize(self, ids: tf.Tensor | tf.RaggedTensor) -> tf.Tensor:
        """Target ids back to text, as `MarianPieces.decode`: up to the first EOS of a row,
        PAD, BOS and UNK left out.

        Args:
            ids: int RaggedTensor [batch, (len)] or dense int tensor [batch, len]; a dense
                rank-1 tensor is one sequence.

        Returns:
            tf.string tensor [batch] (a scalar for a rank-1 input).
        """
        kept, single = text_ids(ids, (PAD_ID, BOS_ID, UNK_ID))
        surfaces = tf.ragged.map_flat_values(self.surface_table.lookup, kept)
        joined = tf.strings.reduce_join(surfaces, axis=-1)
        text = tf.strings.strip(tf.strings.regex_replace(joined, "\u2581", " "))
        return text[0] if single else text
