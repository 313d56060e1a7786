"""The run's SentencePiece model on the Python side: ids of text and text of ids, no TensorFlow.

`tfformer.data.tokenizer.Tokenizer` runs the same model in the TensorFlow graph (tf-text ops, for
`tf.data` and the SavedModel) and holds one of these for what Python does with it.
`tfformer-prepare` encodes a corpus with it, and where only JAX is installed, dev BLEU and
`tfformer-evaluate` translate with it: both give the ids tf-text gives (tests/test_store.py).
"""

from __future__ import annotations

import collections
import io
import os
from typing import Iterable, Iterator, Sequence

import numpy as np
import sentencepiece as spm

from tfformer.special_tokens import (
    BOS_ID,
    BOS_PIECE,
    EOS_ID,
    EOS_PIECE,
    NUM_RESERVED,
    PAD_ID,
    PAD_PIECE,
    UNK_ID,
    UNK_PIECE,
)
from tfformer.utils.checks import check_at_least

MODEL_TYPES = ("bpe", "unigram")


def _text_lines(sentences: Iterable[str]) -> Iterator[str]:
    # SentencePiece reads one sentence per line: a newline inside a sentence would silently
    # split it, so newlines and tabs become spaces; empty sentences carry nothing to learn.
    for sentence in sentences:
        if not isinstance(sentence, str):
            raise TypeError(f"sentences must be str, got {type(sentence).__name__}")
        line = " ".join(sentence.split())
        if line:
            yield line


def _word_counts(lines: Iterable[str], max_sentence_length: int
                 ) -> tuple[int, collections.Counter]:
    """(number of lines, count of each space-separated word in them)."""
    # SentencePiece skips a sentence longer than max_sentence_length bytes: so does the count.
    counts: collections.Counter = collections.Counter()
    num_lines = 0
    for num_lines, line in enumerate(lines, 1):
        if len(line.encode("utf-8")) <= max_sentence_length:
            counts.update(line.split(" "))
    return num_lines, counts


def train_model(sentences: Iterable[str], vocab_size: int, *, model_type: str = "bpe",
                character_coverage: float = 1.0, seed: int = 0, num_threads: int = 1,
                byte_fallback: bool = False, max_sentence_length: int = 4192,
                input_sentence_size: int = 0) -> bytes:
    """The serialized SentencePiece model that `Tokenizer.train` documents (its arguments)."""
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type must be one of {MODEL_TYPES}, got {model_type!r}")
    if (isinstance(vocab_size, bool) or not isinstance(vocab_size, int)
            or vocab_size <= NUM_RESERVED):
        raise ValueError(
            f"vocab_size must be an integer > {NUM_RESERVED} (the reserved ids), "
            f"got {vocab_size!r}")
    if not 0 < character_coverage <= 1:
        raise ValueError(f"character_coverage must be in (0, 1], got {character_coverage}")
    check_at_least("num_threads", num_threads)
    options = dict(
        vocab_size=vocab_size, model_type=model_type,
        character_coverage=character_coverage, hard_vocab_limit=False,
        num_threads=num_threads, byte_fallback=byte_fallback,
        max_sentence_length=max_sentence_length, pad_id=PAD_ID, unk_id=UNK_ID,
        bos_id=BOS_ID, eos_id=EOS_ID, pad_piece=PAD_PIECE, unk_piece=UNK_PIECE,
        bos_piece=BOS_PIECE, eos_piece=EOS_PIECE,
        minloglevel=2)  # the trainer logs to stderr; the library stays quiet
    if model_type == "bpe" and not input_sentence_size:
        # BPE learns from word counts alone (SentencePiece splits each sentence at spaces
        # and merges within words), so it gets "word<TAB>count" lines: the same model, in
        # a fraction of the memory and time of a million sentences.
        num_sentences, counts = _word_counts(_text_lines(sentences), max_sentence_length)
        lines = [f"{word}\t{count}" for word, count in counts.items()]
        options.update(input_format="tsv")
    else:
        lines = list(_text_lines(sentences))
        options.update(input_sentence_size=input_sentence_size, shuffle_input_sentence=True)
        num_sentences = len(lines)
    if not lines:
        raise ValueError("cannot train a tokenizer: no non-empty training sentences")
    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model,
                                       **options)
    except RuntimeError as error:
        # e.g. "Vocabulary size is smaller than required_chars": vocab_size is below the
        # number of distinct characters (which character_coverage=1.0 must all keep).
        raise ValueError(
            f"SentencePiece training failed (vocab_size={vocab_size}, "
            f"{num_sentences} sentences): {error}") from None
    return model.getvalue()


def padded_rows(rows: Sequence[Sequence[int]]) -> np.ndarray:
    """Rows of ids as int32 [rows, longest], PAD after each row's end (encoder inputs)."""
    out = np.full([len(rows), max(map(len, rows), default=0)], PAD_ID, np.int32)
    for i, ids in enumerate(rows):
        out[i, :len(ids)] = ids
    return out


def text_ids(row: Sequence[int], dropped: Iterable[int] = (PAD_ID, BOS_ID)) -> list[int]:
    """The ids of a row that are text: up to its first EOS, without the `dropped` ids."""
    ids = []
    for token in np.asarray(row).tolist():
        if token == EOS_ID:
            break
        if token not in dropped:
            ids.append(token)
    return ids


class SentencePieces:
    """A SentencePiece model whose reserved ids are `tfformer.special_tokens`'.

    Raises:
        ValueError: not a valid model, or one with other reserved ids.
    """

    def __init__(self, model_proto: bytes):
        if not isinstance(model_proto, (bytes, bytearray)) or not model_proto:
            raise ValueError("model_proto must be the non-empty bytes of a SentencePiece model")
        processor = spm.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(bytes(model_proto))
        except (RuntimeError, OSError) as error:
            raise ValueError(f"not a valid SentencePiece model: {error}") from None
        expected = {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID}
        actual = {"pad": processor.pad_id(), "unk": processor.unk_id(),
                  "bos": processor.bos_id(), "eos": processor.eos_id()}
        if actual != expected:
            raise ValueError(
                f"SentencePiece model has reserved ids {actual}, expected {expected} "
                "(tfformer.special_tokens); retrain it with Tokenizer.train")
        self.model_proto = bytes(model_proto)
        self.processor = processor

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "SentencePieces":
        with open(path, "rb") as f:
            return cls(f.read())

    @property
    def vocab_size(self) -> int:
        return self.processor.vocab_size()

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """The piece ids of each text, without BOS or EOS."""
        return self.processor.encode(list(texts), out_type=int)

    def encode_source_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """The source ids of each text, without EOS: its pieces' (one shared vocabulary)."""
        return self.encode(texts)

    def source_tokens(self, text: str) -> list[str]:
        """The pieces of one source text, as CTranslate2 takes them."""
        return self.processor.encode(text, out_type=str)

    @property
    def source_pieces(self) -> list[str]:
        """The piece of each id (the source's and the target's)."""
        return [self.processor.id_to_piece(i) for i in range(self.processor.get_piece_size())]

    target_pieces = source_pieces

    def encode_source(self, texts: Sequence[str]) -> np.ndarray:
        """Encoder inputs: pieces + [EOS] of each text, int32 [texts, longest], PAD after."""
        return padded_rows([ids + [EOS_ID] for ids in self.encode(texts)])

    def decode(self, rows: Iterable[Sequence[int]]) -> list[str]:
        """The text of each row of ids: up to its first EOS, PAD and BOS left out (a padded
        search result can be passed as it is)."""
        return [self.processor.decode(text_ids(row)) for row in rows]


def load_pieces(run_dir):
    """The Python side of a run directory's tokenizer: `SentencePieces` of its tokenizer.model,
    or an imported model's `tfformer.data.marian_pieces.MarianPieces`.

    Raises:
        FileNotFoundError: naming a missing file.
    """
    from tfformer.utils.run_dir import RunDir

    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    if os.path.exists(run.vocabulary):
        from tfformer.data.marian_pieces import MarianPieces

        return MarianPieces.from_dir(run)
    return SentencePieces.from_file(run.tokenizer)
