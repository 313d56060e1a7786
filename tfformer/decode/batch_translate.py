"""Translating many sentences a batch at a time: the one loop that dev BLEU, tfformer-evaluate,
the serving client and tfformer-translate share.

Imports nothing but the standard library: the serving side uses it without training code.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Sequence, TypeVar

from tfformer.utils.checks import check_at_least

Result = TypeVar("Result")


def translate_in_batches(translate: Callable[[list[str]], Sequence[Result]],
                         sentences: Iterable[str], batch_size: int) -> Iterator[list[Result]]:
    """Calls `translate` on consecutive batches of `batch_size` sentences (the last may be
    shorter) and yields each batch's results as they come: `sentences` is read lazily, so a
    stream (stdin) is translated while it is read.

    Raises:
        ValueError: batch_size < 1.
        RuntimeError: `translate` returned another number of results than it was given.
    """
    check_at_least("batch_size", batch_size)
    batch: list[str] = []
    for sentence in sentences:
        batch.append(sentence)
        if len(batch) == batch_size:
            yield _checked(translate, batch)
            batch = []
    if batch:
        yield _checked(translate, batch)


def _checked(translate: Callable[[list[str]], Sequence[Result]],
             batch: list[str]) -> list[Result]:
    results = list(translate(batch))
    if len(results) != len(batch):
        raise RuntimeError(f"{len(results)} translations for {len(batch)} sentences")
    return results
