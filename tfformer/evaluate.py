"""Scoring a model on a test set: sacreBLEU BLEU and chrF on detokenized text (`tfformer-evaluate`).

The model is a run directory (its model.keras, one checkpoint, or the average of the last K
checkpoints, §6.1) searched with the given beam and alpha, or an exported SavedModel (searched as
it was exported). Sentences are translated in batches of similar length, and the hypotheses are
put back in input order.

A run directory is searched in TensorFlow's graph where TensorFlow runs the model, else step by
step in `keras.ops` (`tfformer.decode.keras_translator`, the same tokens): with JAX alone, a run
is evaluated on a TSV file, source and reference files or a prepared store's dev set (a
SavedModel needs TensorFlow).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Sequence

import sacrebleu

from tfformer.contract import saved_model_dir
from tfformer.data.errors import DataError
from tfformer.data.store import Store, is_store_spec, store_path
from tfformer.data.tsv_lines import read_pairs
from tfformer.decode.batch_translate import translate_in_batches

TranslateBatch = Callable[[list[str]], list[str]]


@dataclasses.dataclass
class Scores:
    """Corpus-level scores with the sacreBLEU signatures that make them reproducible."""

    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str
    sentences: int


def score(hypotheses: Sequence[str], references: Sequence[str]) -> Scores:
    """sacreBLEU's corpus BLEU (13a tokenization) and chrF of detokenized hypotheses."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    bleu, chrf = sacrebleu.BLEU(), sacrebleu.CHRF()
    bleu_score = bleu.corpus_score(list(hypotheses), [list(references)])
    chrf_score = chrf.corpus_score(list(hypotheses), [list(references)])
    return Scores(bleu_score.score, chrf_score.score, str(bleu.get_signature()),
                  str(chrf.get_signature()), len(references))


def translate_in_length_order(translate: TranslateBatch, sources: Sequence[str],
                              batch_size: int = 32,
                              progress: Callable[[int], None] | None = None,
                              length: Callable[[Any], int] = len) -> list[str]:
    """Translates `sources` in batches of similar `length` (less padding, shorter searches)
    and returns the hypotheses in the order of `sources`; `progress(n)` is called after each
    batch with the number of sentences done. Any items go: `length` measures one."""
    order = sorted(range(len(sources)), key=lambda i: (length(sources[i]), i))
    hypotheses: list[str | None] = [None] * len(sources)
    done = 0
    for translated in translate_in_batches(translate, [sources[i] for i in order], batch_size):
        for row, hypothesis in zip(order[done:], translated):
            hypotheses[row] = hypothesis
        done += len(translated)
        if progress:
            progress(done)
    return hypotheses  # type: ignore[return-value]


def read_test_set(tsv: str | None = None, source_file: str | None = None,
                  reference_file: str | None = None) -> tuple[list[str], list[str], str]:
    """(sources, references, description) from a TSV file (FILE, or `tsv:FILE` as tfformer-train's
    --data writes it), a prepared store's dev set (`prepared:DIR`) or from a source and a
    reference file (one sentence per line). A malformed TSV line is an error naming file and
    line."""
    if tsv and (source_file or reference_file):
        raise ValueError("give a TSV file or source and reference files, not both")
    if tsv and is_store_spec(tsv):
        pairs = Store.open(store_path(tsv)).dev_pairs()
        return [s for s, _ in pairs], [t for _, t in pairs], f"{tsv} (its dev set)"
    if tsv and tsv.startswith("tsv:"):
        tsv = tsv[len("tsv:"):]
        if "," in tsv or "+" in tsv:
            raise ValueError(f"a test set is one file: tsv:FILE, got tsv:{tsv}")
    if tsv:
        pairs, _ = read_pairs(tsv)  # the training stream's line rules, without TensorFlow
        return [s for s, _ in pairs], [t for _, t in pairs], tsv
    if not (source_file and reference_file):
        raise ValueError("give a TSV file, or both a source and a reference file")
    sides = []
    for path in (source_file, reference_file):
        with open(path, encoding="utf-8") as f:
            try:
                sides.append([line.rstrip("\r\n") for line in f])
            except UnicodeDecodeError as error:
                raise DataError(path, None, f"not valid UTF-8 ({error.reason})") from None
    if len(sides[0]) != len(sides[1]):
        raise DataError(reference_file, None, f"{len(sides[1])} lines, but {source_file} has "
                                              f"{len(sides[0])}")
    return sides[0], sides[1], f"{source_file} + {reference_file}"


def load_run_translator(path: str, **decoding):
    """The run directory's translator: the graph `Translator` where TensorFlow runs the model,
    else a `KerasTranslator` (the same tokens and scores)."""
    from tfformer.utils.backends import on_tensorflow

    if on_tensorflow():
        from tfformer.decode.translator import load_translator
    else:
        from tfformer.decode.keras_translator import load_keras_translator as load_translator
    return load_translator(path, **decoding)


def load_translate_batch(path: str, *, checkpoint: str | None = None,
                         average: int | None = None, beam_size: int | None = None,
                         length_penalty: float | None = None,
                         max_output_extra: int | None = None) -> tuple[TranslateBatch, dict]:
    """A function translating a batch of sentences with the model at `path`, and a description
    of the model and search for the report."""
    search = {"beam_size": beam_size, "length_penalty": length_penalty,
              "max_output_extra": max_output_extra}
    if saved_model_dir(path) is not None:
        if checkpoint or average or any(v is not None for v in search.values()):
            raise ValueError(f"{path} is an exported SavedModel: its weights and search are "
                             "fixed at export (no --checkpoint, --average, --beam-size, ...)")
        from tfformer.serving.client import load_saved_model, translate_saved_model

        saved_model = load_saved_model(path)
        return (lambda batch: [t.text for t in translate_saved_model(batch, saved_model)],
                {"model": path, "kind": "saved_model", "search": "as exported"})
    if checkpoint and average:
        raise ValueError("give --checkpoint or --average, not both")
    from tfformer.train.checkpoints import average_last

    translator = load_run_translator(path, **{k: v for k, v in search.items() if v is not None})
    weights = "model.keras"
    if checkpoint:
        if not os.path.exists(checkpoint):
            raise FileNotFoundError(f"checkpoint {checkpoint} not found")
        translator.model.load_weights(checkpoint)
        weights = checkpoint
    elif average:
        paths = average_last(translator.model, path, average)
        weights = f"average of {', '.join(os.path.basename(p) for p in paths)}"

    def translate(batch: list[str]) -> list[str]:
        return [text for text, _ in translator.translate_texts(batch)]

    return translate, {"model": path, "kind": "run_dir", "weights": weights,
                       "search": dataclasses.asdict(translator.decoding)}


# (score, normalized score, token scores) of a pair: `tfformer.decode.scoring`'s.
PairScore = tuple[float, float, list[float]]


def load_scorer(path: str) -> Callable[[list[tuple[str, str]]], list[PairScore]]:
    """A function scoring a batch of (source, target) pairs with the model at `path`: a run
    directory (on any backend: `tfformer.decode.scoring`) or an exported SavedModel (its
    `score` signature)."""
    if saved_model_dir(path) is not None:
        from tfformer.contract import SCORE_SIGNATURE, TARGETS_NAME
        from tfformer.serving.client import load_saved_model, translate_saved_model

        saved_model = load_saved_model(path)

        def score_saved_model(batch: list[tuple[str, str]]) -> list[PairScore]:
            scores = translate_saved_model([s for s, _ in batch], saved_model, SCORE_SIGNATURE,
                                           len(batch), **{TARGETS_NAME: [t for _, t in batch]})
            return [(s.score, s.normalized, list(s.token_scores)) for s in scores]

        return score_saved_model
    translator = load_run_translator(path)

    def score(batch: list[tuple[str, str]]) -> list[PairScore]:
        return translator.score_texts([s for s, _ in batch], [t for _, t in batch])

    return score
