"""One shared SentencePiece subword vocabulary for source and target (paper §5.1).

Training uses the `sentencepiece` package (`tfformer.data.pieces`, also the Python side of
the model); tokenizing and detokenizing use the SentencePiece ops
of `tensorflow_text`, so the very same `Tokenizer` (a `tf.Module`) works inside `tf.data`,
inside `tf.function` and inside an exported SavedModel, with no `tf.py_function`.

Reserved ids come from `tfformer.special_tokens` (pad 0, unk 1, bos 2, eos 3) and are written
into the SentencePiece model, so the ids training sees are the ids the exported model uses.

Model type: BPE by default, as the paper used byte-pair encoding for its shared English-German
vocabulary (§5.1). BPE also fills the requested vocabulary size more closely on small corpora,
where the unigram trainer stops well short of it. "unigram" is available and is what one
would pick for subword regularization (sampling segmentations).

IMPORTANT (seeding gotcha): call `tf.random.set_seed` / `keras.utils.set_random_seed` BEFORE
creating a `Tokenizer` (or anything holding one). In eager mode, setting the global seed clears
TensorFlow's kernel cache, which destroys the tf-text SentencePiece resource; every later call
then fails with `NotFoundError: Resource localhost/_0_SentencepieceOp/... does not exist`.
"""

from __future__ import annotations

import os
from typing import Iterable

import tensorflow as tf
import tensorflow_text as tf_text

from tfformer.data.pieces import SentencePieces, train_model
from tfformer.special_tokens import BOS_ID, EOS_ID, PAD_ID
from tfformer.utils.files import atomic_write

MODEL_FILENAME = "tokenizer.model"
"""Name of the SentencePiece model file inside a run directory."""


def _append_column(pieces: tf.RaggedTensor, token_id: int,
                   first: bool = False) -> tf.RaggedTensor:
    """Adds `token_id` at the end (or, with `first`, the start) of every row."""
    column = tf.fill(tf.stack([pieces.nrows(out_type=tf.int32), 1]),
                     tf.constant(token_id, tf.int32))
    return tf.concat([column, pieces] if first else [pieces, column], axis=1)


def text_ids(ids, dropped=(PAD_ID, BOS_ID)) -> tuple[tf.RaggedTensor, bool]:
    """The ids of each row that are text, as `detokenize` takes them: up to the row's first
    EOS, without the `dropped` ids; and whether `ids` was one sequence (a dense rank-1 tensor).
    """
    dense, single = _dense_ids(ids)
    keep = tf.equal(tf.cumsum(tf.cast(tf.equal(dense, EOS_ID), tf.int32), axis=1), 0)
    for token in dropped:
        keep &= tf.not_equal(dense, token)
    return tf.ragged.boolean_mask(dense, keep), single


def _dense_ids(ids) -> tuple[tf.Tensor, bool]:
    """`ids` as int32 [batch, len] (PAD after a ragged row's end), and whether it was one
    sequence (a dense rank-1 tensor)."""
    if isinstance(ids, tf.RaggedTensor):
        if ids.ragged_rank != 1:
            raise ValueError(f"detokenize expects [batch, (len)] ids, got ragged rank "
                             f"{ids.ragged_rank}")
        # PAD is dropped by detokenize, so padding the ragged rows with it changes nothing.
        return tf.cast(ids, tf.int32).to_tensor(default_value=PAD_ID), False
    dense = tf.cast(tf.convert_to_tensor(ids), tf.int32)
    if dense.shape.rank == 1:
        return dense[tf.newaxis, :], True
    if dense.shape.rank != 2:
        raise ValueError(f"detokenize expects ids of rank 1 or 2, got shape {dense.shape}")
    return dense, False


class Tokenizer(tf.Module):
    """A SentencePiece tokenizer usable in graph mode and savable in a SavedModel.

    Construct it from serialized model bytes, `Tokenizer.from_file(path)` or `Tokenizer.train`.
    Create it only after seeding TensorFlow (see the module docstring).

    Args:
        model_proto: the serialized SentencePiece `ModelProto` (the bytes of a `.model` file).
        name: name of the tf.Module.

    Raises:
        ValueError: if the model is not valid or its reserved ids differ from
            `tfformer.special_tokens`.
    """

    def __init__(self, model_proto: bytes, name: str = "tokenizer"):
        super().__init__(name=name)
        # The Python side (vocabulary, normalize(), piece strings, ids without TensorFlow),
        # which also checks the model and its reserved ids.
        self.pieces = SentencePieces(model_proto)
        self._model_proto = self.pieces.model_proto
        self._processor = self.pieces.processor
        # The tf-text tokenizer holds a TrackableResource: as an attribute of this tf.Module it
        # is tracked and therefore saved with any SavedModel that references this object.
        self.sentencepiece = tf_text.SentencepieceTokenizer(
            model=self._model_proto, out_type=tf.int32, add_bos=False, add_eos=False)

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def train(cls, sentences: Iterable[str], vocab_size: int, *, model_type: str = "bpe",
              character_coverage: float = 1.0, seed: int = 0, num_threads: int = 1,
              byte_fallback: bool = False, max_sentence_length: int = 4192,
              input_sentence_size: int = 0) -> "Tokenizer":
        """Trains one shared vocabulary on `sentences` (source and target sides together).

        The requested size is a soft limit (`hard_vocab_limit=False`): a small corpus may not
        contain enough distinct pieces, and then SentencePiece stops early instead of failing
        with "Vocabulary size too high". Read the final size from `tokenizer.vocab_size`.

        Args:
            sentences: the training text, one sentence per item (e.g. every source and target).
            vocab_size: requested vocabulary size, the 4 reserved ids included.
            model_type: "bpe" (default, as in the paper) or "unigram".
            character_coverage: fraction of characters covered by the vocabulary; 1.0 keeps
                every character seen (right for Latin scripts; ~0.9995 for CJK).
            seed: seed of SentencePiece's random generator (sentence sampling).
            num_threads: training threads; 1 (default) makes training deterministic.
            byte_fallback: split unknown characters into byte pieces instead of <unk>
                (costs 256 ids).
            max_sentence_length: longer sentences (in bytes) are skipped by the trainer.
            input_sentence_size: if > 0, train on a seeded random sample of this many sentences.

        Returns:
            the trained Tokenizer.

        Raises:
            ValueError: on invalid arguments, no training text, or a failure of the trainer.
        """
        return cls(train_model(
            sentences, vocab_size, model_type=model_type, character_coverage=character_coverage,
            seed=seed, num_threads=num_threads, byte_fallback=byte_fallback,
            max_sentence_length=max_sentence_length, input_sentence_size=input_sentence_size))

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "Tokenizer":
        """Loads a `.model` file written by `save` (or by SentencePiece itself).

        Raises:
            FileNotFoundError: if `path` does not exist.
            ValueError: if it is not a compatible SentencePiece model.
        """
        with open(path, "rb") as f:
            return cls(f.read())

    def save(self, path: str | os.PathLike) -> None:
        """Writes the SentencePiece model to `path` (a run directory uses `tokenizer.model`).

        Written under a temporary name and renamed, so a reader never sees half a file.
        """

        def write(temporary: str) -> None:
            with open(temporary, "wb") as f:
                f.write(self._model_proto)

        atomic_write(os.fspath(path), write)

    # -- properties --------------------------------------------------------------------------

    @property
    def model_proto(self) -> bytes:
        """The serialized SentencePiece model."""
        return self._model_proto

    @property
    def vocab_size(self) -> int:
        """Number of ids, reserved ids included; may be below the size asked of `train`."""
        return self._processor.get_piece_size()

    def id_to_piece(self, token_id: int) -> str:
        """The piece string of `token_id` (e.g. "▁perro"), for inspection and logs."""
        if not 0 <= token_id < self.vocab_size:
            raise ValueError(f"token id {token_id} is outside [0, {self.vocab_size})")
        return self._processor.id_to_piece(token_id)

    def normalize(self, text: str) -> str:
        """SentencePiece's own normalization of `text`, as plain text.

        `detokenize(tokenize(x)) == normalize(x)` for text whose characters are all in the
        vocabulary (unknown characters come back as " ⁇ " unless byte_fallback was used).
        """
        # normalize() marks spaces with U+2581 and adds a leading one (the "dummy prefix").
        normalized = self._processor.normalize(text).replace("\u2581", " ")
        return normalized[1:] if normalized.startswith(" ") else normalized

    # -- graph ops ---------------------------------------------------------------------------

    def tokenize(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """Tokenizes a batch of strings into ids, with no BOS/EOS added.

        Args:
            strings: tf.string tensor [batch] (any batch size, also unknown in a tf.function).

        Returns:
            int32 RaggedTensor [batch, (pieces)].
        """
        strings = tf.convert_to_tensor(strings, dtype=tf.string)
        return self.sentencepiece.tokenize(strings)

    def encode_source(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """Encoder input ids: pieces + [EOS], the same in training and in the exported model.

        Args:
            strings: tf.string tensor [batch].

        Returns:
            int32 RaggedTensor [batch, (pieces + 1)].
        """
        return _append_column(self.tokenize(strings), EOS_ID)

    def encode_target(self, strings: tf.Tensor) -> tuple[tf.RaggedTensor, tf.RaggedTensor]:
        """Decoder input and labels for teacher forcing: ([BOS] + pieces, pieces + [EOS]).

        Args:
            strings: tf.string tensor [batch].

        Returns:
            (target_in, target_out), int32 RaggedTensors [batch, (pieces + 1)].
        """
        pieces = self.tokenize(strings)
        return _append_column(pieces, BOS_ID, first=True), _append_column(pieces, EOS_ID)

    def detokenize(self, ids: tf.Tensor | tf.RaggedTensor) -> tf.Tensor:
        """Turns ids back into text, ready for search output.

        Everything from the first EOS of a row on is ignored, and so are PAD and BOS ids, so
        a dense, padded [batch, length] search result can be passed as it is.

        Args:
            ids: int RaggedTensor [batch, (len)] or dense int tensor [batch, len]; a dense
                rank-1 tensor is one sequence.

        Returns:
            tf.string tensor [batch] (a scalar for a rank-1 input).
        """
        kept, single = text_ids(ids)
        text = self.sentencepiece.detokenize(kept)
        return text[0] if single else text


def load_tokenizer(run_dir):
    """The graph tokenizer of a run directory: its `tokenizer.model`, or an imported model's
    `tfformer.data.marian_tokenizer.MarianTokenizer` (vocabulary.json and two SentencePiece
    models).

    Raises:
        FileNotFoundError: naming a missing file.
    """
    from tfformer.utils.run_dir import RunDir

    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    if os.path.exists(run.vocabulary):
        from tfformer.data.marian_tokenizer import MarianTokenizer

        return MarianTokenizer.from_dir(run)
    return Tokenizer.from_file(run.tokenizer)
