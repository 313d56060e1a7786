"""An imported Marian model's vocabulary on the Python side: ids of text and text of ids, no
TensorFlow.

A Marian (OPUS-MT) model tokenizes its source with one SentencePiece model (`source.spm`), its
target with another (`target.spm`), and numbers the pieces with a vocabulary of its own
(`vocab.json`; `target_vocab.json` too where the two sides have separate vocabularies), not
with SentencePiece's ids. The importer (`tfformer.pretrained.marian`) writes that vocabulary in
tfformer's id order, `RUN/vocabulary.json`: the four reserved ids of `tfformer.special_tokens`
first, then every other piece. The rules are Hugging Face's `MarianTokenizer`'s:

- a source that starts with a language code (`>>fra<<`: ">>", then up to the first "<<") takes
  the code as one piece, then the SentencePiece pieces of the rest;
- a piece that the vocabulary lacks (an unknown character, say) is `<unk>`;
- the source ends with EOS;
- decoding leaves out EOS and what follows, PAD, BOS and `<unk>` (`skip_special_tokens=True`),
  and joins the pieces with the SentencePiece model MarianTokenizer decodes with: the source's
  where both sides share one vocabulary, else the target's.

`tfformer.data.marian_tokenizer.MarianTokenizer` runs the same rules in the TensorFlow graph.
"""

from __future__ import annotations

import json
import os
from typing import Iterable, Sequence

import numpy as np
import sentencepiece as spm

from tfformer.data.pieces import padded_rows, text_ids
from tfformer.special_tokens import BOS_ID, EOS_ID, NUM_RESERVED, PAD_ID, UNK_ID, UNK_PIECE
from tfformer.utils.files import atomic_write_text
from tfformer.utils.run_dir import RunDir

SIDES = ("source", "target")


def split_language_code(text: str) -> tuple[str | None, str]:
    """(the language code a text starts with, or None; the rest), as MarianTokenizer splits it:
    ">>" at the start, up to the first "<<"."""
    end = text.find("<<") if text.startswith(">>") else -1
    if end == -1:
        return None, text
    return text[:end + 2], text[end + 2:]


def _processor(model_proto: bytes, what: str) -> spm.SentencePieceProcessor:
    processor = spm.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(bytes(model_proto))
    except (RuntimeError, OSError) as error:
        raise ValueError(f"{what} is not a valid SentencePiece model: {error}") from None
    return processor


def _check_pieces(pieces, what: str) -> list[str]:
    if not isinstance(pieces, list) or len(pieces) <= NUM_RESERVED or not all(
            isinstance(piece, str) for piece in pieces):
        raise ValueError(f"{what} must be a list of more than {NUM_RESERVED} piece strings")
    rest = pieces[NUM_RESERVED:]
    if len(set(rest)) != len(rest):
        repeated = sorted({p for p in rest if rest.count(p) > 1})[:5]
        raise ValueError(f"{what} names a piece twice: {repeated}")
    return pieces


class MarianPieces:
    """Two SentencePiece models and the pieces of tfformer's ids (see the module docstring).

    Args:
        source_model, target_model: the serialized SentencePiece models (source.spm,
            target.spm).
        source_pieces: the piece of each source id, reserved ids first.
        target_pieces: the piece of each target id, or None: the source's (one vocabulary).
        decode_with: "source" or "target", the SentencePiece model that joins decoded pieces.

    Raises:
        ValueError: a model that does not load, a vocabulary that is not a list of pieces.
    """

    def __init__(self, source_model: bytes, target_model: bytes, source_pieces: list[str],
                 target_pieces: list[str] | None = None, decode_with: str | None = None):
        self.source_model, self.target_model = bytes(source_model), bytes(target_model)
        self.source_processor = _processor(source_model, "the source SentencePiece model")
        self.target_processor = _processor(target_model, "the target SentencePiece model")
        self.source_pieces = _check_pieces(source_pieces, "the source vocabulary")
        self.shared = target_pieces is None
        self.target_pieces = self.source_pieces if self.shared else _check_pieces(
            target_pieces, "the target vocabulary")
        self.decode_with = decode_with or ("source" if self.shared else "target")
        if self.decode_with not in SIDES:
            raise ValueError(f"decode_with must be one of {SIDES}, got {self.decode_with!r}")
        self.source_ids = {p: i for i, p in enumerate(self.source_pieces) if i >= NUM_RESERVED}
        self.target_ids = self.source_ids if self.shared else {
            p: i for i, p in enumerate(self.target_pieces) if i >= NUM_RESERVED}

    # -- files -------------------------------------------------------------------------------

    @classmethod
    def from_dir(cls, run_dir: str | os.PathLike | RunDir) -> "MarianPieces":
        """Loads RUN/vocabulary.json, RUN/source.spm and RUN/target.spm.

        Raises:
            FileNotFoundError: naming a missing file.
            ValueError: naming the file that is not what it should be.
        """
        run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
        models = []
        for path in (run.source_spm, run.target_spm):
            if not os.path.exists(path):
                raise FileNotFoundError(f"{path} not found: an imported run needs "
                                        f"{os.path.basename(run.source_spm)}, "
                                        f"{os.path.basename(run.target_spm)} and "
                                        f"{os.path.basename(run.vocabulary)}")
            with open(path, "rb") as f:
                models.append(f.read())
        try:
            with open(run.vocabulary, encoding="utf-8") as f:
                values = json.load(f)
            return cls(*models, values["source_pieces"], values.get("target_pieces"),
                       values.get("decode_with"))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{run.vocabulary}: {error}") from None

    def save(self, run_dir: str | os.PathLike | RunDir) -> None:
        """Writes RUN/vocabulary.json, RUN/source.spm and RUN/target.spm, each atomically."""
        from tfformer.utils.files import atomic_write

        run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
        for path, model in ((run.source_spm, self.source_model),
                            (run.target_spm, self.target_model)):
            def write(temporary: str, model=model) -> None:
                with open(temporary, "wb") as f:
                    f.write(model)

            atomic_write(path, write)
        atomic_write_text(run.vocabulary, json.dumps({
            "source_pieces": self.source_pieces,
            "target_pieces": None if self.shared else self.target_pieces,
            "decode_with": self.decode_with}, ensure_ascii=False))

    # -- sizes -------------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """The number of target ids (the model's vocab_size)."""
        return len(self.target_pieces)

    @property
    def source_vocab_size(self) -> int:
        return len(self.source_pieces)

    def id_to_piece(self, token_id: int) -> str:
        """The target piece of `token_id`."""
        return self.target_pieces[token_id]

    # -- text to ids -------------------------------------------------------------------------

    def source_pieces_of(self, text: str) -> list[str]:
        """The pieces of one source text: its language code, if any, then SentencePiece's."""
        code, rest = split_language_code(text)
        return ([code] if code is not None else []) + \
            self.source_processor.encode(rest, out_type=str)

    def source_tokens(self, text: str) -> list[str]:
        """The pieces of one source text as CTranslate2 takes them: those the vocabulary lacks
        as <unk>."""
        return [piece if piece in self.source_ids else UNK_PIECE
                for piece in self.source_pieces_of(text)]

    def encode_source_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """The source ids of each text, without EOS."""
        return [[self.source_ids.get(piece, UNK_ID) for piece in self.source_pieces_of(text)]
                for text in texts]

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """The target ids of each text (a forced prefix, a reference), without BOS or EOS."""
        return [[self.target_ids.get(piece, UNK_ID) for piece in pieces]
                for pieces in self.target_processor.encode(list(texts), out_type=str)]

    def encode_source(self, texts: Sequence[str]) -> np.ndarray:
        """Encoder inputs: ids + [EOS] of each text, int32 [texts, longest], PAD after."""
        return padded_rows([ids + [EOS_ID] for ids in self.encode_source_ids(texts)])

    # -- ids to text -------------------------------------------------------------------------

    @property
    def decode_processor(self) -> spm.SentencePieceProcessor:
        return self.source_processor if self.decode_with == "source" else self.target_processor

    def surfaces(self) -> list[bytes]:
        """What each target id adds to decoded text before spaces are restored, as
        SentencePiece's decode_pieces writes it: a piece the decoding model lacks as it is
        (decode_pieces keeps it), a control piece nothing, its unknown piece " ⁇ ", a byte
        piece its byte, any other piece itself (U+2581 marking the spaces)."""
        processor = self.decode_processor
        out = []
        for piece in self.target_pieces:
            piece_id = processor.piece_to_id(piece)
            if processor.is_unknown(piece_id) and piece != processor.id_to_piece(piece_id):
                out.append(piece.encode("utf-8"))
            elif processor.is_control(piece_id):
                out.append(b"")
            elif processor.is_unknown(piece_id):
                out.append(" \u2047 ".encode("utf-8"))
            elif processor.is_byte(piece_id):
                out.append(bytes([int(piece[3:5], 16)]))
            else:
                out.append(piece.encode("utf-8"))
        return out

    def decode(self, rows: Iterable[Sequence[int]]) -> list[str]:
        """The text of each row of target ids: up to its first EOS, with PAD, BOS and UNK left
        out (a padded search result can be passed as it is)."""
        processor = self.decode_processor
        return [processor.decode_pieces([self.target_pieces[i] for i in text_ids(
                    row, (PAD_ID, BOS_ID, UNK_ID))]).replace("\u2581", " ").strip()
                for row in rows]
