"""The Translator as a string-in/string-out SavedModel for TF Serving, and its checks.

The signatures and tensor names are those of `tfformer.contract`. One trace serves
every batch size and sentence length. Everything in it is a core TensorFlow op or a
tensorflow-text 2.20 op, which is what a stock TensorFlow Serving binary links; `check_ops`
proves it against the list in `serving_ops.txt` (made by tools/make_op_allowlist.py from
tensorflow 2.20.0 + tensorflow-text 2.20.0).
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
from importlib import resources
from typing import Any, Iterable, Sequence

import tensorflow as tf

from tfformer.contract import (
    ALIGN_SIGNATURE,
    DEFAULT_SIGNATURE,
    DOCUMENT_SIGNATURE,
    INPUT_DTYPES,
    INPUT_NAME,
    NBEST_K_NAME,
    NBEST_SIGNATURE,
    OUTPUT_ALIGNMENTS,
    OUTPUT_LENGTHS,
    OUTPUT_SCORES,
    OUTPUT_TOKEN_SCORES,
    OUTPUT_TRANSLATIONS,
    PREFIX_SIGNATURE,
    PREFIXES_NAME,
    SAMPLE_SIGNATURE,
    SCORE_SIGNATURE,
    SEED_NAME,
    SIGNATURE_INPUTS,
    SIGNATURE_NAMES,
    TARGETS_NAME,
    TEMPERATURE_NAME,
    TOP_K_NAME,
    TOP_P_NAME,
    TRANSLATE_SIGNATURE,
    read_saved_model,
)
from tfformer.decode import scoring
from tfformer.decode.translator import Translator
from tfformer.export.warmup import warmup_requests, write_warmup_requests
from tfformer.utils.backends import HIDDEN_AT_TENSORFLOW_IMPORT

# How far the reloaded export's log-probabilities may be from the in-memory ones (the same graph
# on another process's thread pools: float32 sums in another order).
SCORE_TOLERANCE = 1e-4

# Sentences of each warmup request (the first check sentences): a short request per signature
# is enough for TF Serving to run each one once before it serves.
WARMUP_SENTENCES = 2


class ExportError(RuntimeError):
    """The export is not fit for stock TF Serving, or it does not reproduce the Translator."""


def saved_model_ops(export_dir: str | os.PathLike) -> set[str]:
    """Every op type in the SavedModel's graph, functions (and nested functions) included."""
    saved_model = read_saved_model(export_dir)
    ops = set()
    for meta_graph in saved_model.meta_graphs:
        ops.update(node.op for node in meta_graph.graph_def.node)
        for function in meta_graph.graph_def.library.function:
            ops.update(node.op for node in function.node_def)
    # Calls to library functions appear as ops named after the function: not kernels.
    functions = {f.signature.name for mg in saved_model.meta_graphs
                 for f in mg.graph_def.library.function}
    return ops - functions


def serving_op_allowlist() -> set[str]:
    """Ops of stock TF Serving: core TF 2.20 (no XLA ops) plus tensorflow-text 2.20's ops."""
    text = resources.files("tfformer.export").joinpath("serving_ops.txt").read_text()
    return {line.strip() for line in text.splitlines() if line.strip() and line[0] != "#"}


def check_ops(export_dir: str | os.PathLike) -> set[str]:
    """Raises ExportError naming every op that stock TF Serving lacks; returns the ops used."""
    ops = saved_model_ops(export_dir)
    missing = sorted(ops - serving_op_allowlist())
    if missing:
        raise ExportError(
            f"{export_dir} uses op(s) that stock TensorFlow Serving (core TF + tensorflow-text "
            f"2.20) does not have: {', '.join(missing)}. XlaDynamicUpdateSlice comes from "
            f"keras.ops.slice_update; grow tensors with tf.concat instead.")
    return ops


# Runs in a fresh interpreter that imports only tensorflow and tensorflow_text: proves the
# export needs no tfformer, no Keras objects and no Python from this process. Reads
# {signature: {input: [values]}} and answers {signature: {output: values}}.
_FRESH_PROCESS_SCRIPT = f"""
import json, os, sys
# Nor what TensorFlow's import loads for integrations a SavedModel never uses: hidden, as the
# console scripts hide them.
os.environ["KERAS_BACKEND"] = "tensorflow"
sys.modules.update(dict.fromkeys({HIDDEN_AT_TENSORFLOW_IMPORT!r}))
""" + """
# The imports make no garbage: the cyclic garbage collector is off while they run, and their
# objects are then out of its reach, as in the console scripts (cli.console.import_tensorflow).
import gc
gc.disable()
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the SentencePiece ops
gc.freeze()
gc.enable()
loaded = tf.saved_model.load(sys.argv[1])
calls, dtypes = json.loads(sys.stdin.read())
answers = {}
for signature, inputs in calls.items():
    outputs = loaded.signatures[signature](**{
        name: tf.constant(values, tf.as_dtype(dtypes[name])) for name, values in inputs.items()})
    answers[signature] = {
        name: [v.decode("utf-8") if isinstance(v, bytes) else v
               for v in tensor.numpy().ravel().tolist()]
        for name, tensor in outputs.items()} | {
        "shape/" + name: tensor.shape.as_list() for name, tensor in outputs.items()}
answers["modules"] = sorted(m.split(".")[0] for m in sys.modules
                            if m.split(".")[0] in ("tfformer", "keras_hub"))
answers["versions"] = {"tensorflow": tf.__version__, "tensorflow_text": tensorflow_text.__version__}
print(json.dumps(answers))
"""


class FreshProcess:
    """A new `python` process that imports tensorflow and tensorflow_text only and loads the
    export as soon as it starts; `answers(calls)` then sends it the calls. Start it before
    other work (the export's in-memory check): its import and load take seconds of their own.
    A context manager: leaving it kills the process if it still runs.

    Args:
        export_dir: the SavedModel's directory.
        python: the interpreter (another TensorFlow's, for the TF 2.20 check).
    """

    def __init__(self, export_dir: str | os.PathLike, python: str = sys.executable):
        env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        self.export_dir = os.path.abspath(export_dir)
        self.process = subprocess.Popen(
            [python, "-c", _FRESH_PROCESS_SCRIPT, self.export_dir], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            # Not the caller's cwd: `python -c` puts it on sys.path, and the check must not
            # find tfformer there.
            env=env, cwd=os.path.dirname(self.export_dir))

    def answers(self, calls: dict[str, dict[str, list]], timeout: float = 600) -> dict[str, Any]:
        """Calls signatures of the export: `calls` is {signature: {input: [one value per
        sentence]}}. Once only: the process exits after answering.

        Returns:
            {signature: {output: values flattened, "shape/" + output: its shape}, "modules":
            tfformer modules seen (none), "versions": {"tensorflow", "tensorflow_text": the
            versions that ran it}}.
        """
        try:
            stdout, stderr = self.process.communicate(json.dumps([calls, INPUT_DTYPES]),
                                                      timeout=timeout)
        finally:
            self.close()
        if self.process.returncode != 0:
            raise ExportError(f"loading {self.export_dir} in a fresh process failed:\n"
                              f"{stderr[-4000:]}")
        return json.loads(stdout.strip().splitlines()[-1])

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            stream.close()

    def __enter__(self) -> FreshProcess:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def run_in_fresh_process(export_dir: str | os.PathLike, calls: dict[str, dict[str, list]],
                         python: str = sys.executable, timeout: float = 600) -> dict[str, Any]:
    """Calls signatures of the export in a new `python` process that imports tensorflow and
    tensorflow_text only (`FreshProcess`): `calls` and the answers as `FreshProcess.answers`
    takes and gives them."""
    with FreshProcess(export_dir, python) as process:
        return process.answers(calls, timeout)


def check_calls(sentences: Sequence[str], k: int,
                prefixes: Sequence[str] | None = None,
                targets: Sequence[str] | None = None) -> dict[str, dict[str, list]]:
    """One call of each signature on `sentences`: translate_nbest with `k`, translate_sample
    with temperature 1, no top-k or top-p and seed i for sentence i, translate_prefix with
    `prefixes` (default: empty ones), translate_align, translate_document (each sentence a
    document), score with `targets` (default: the sentences themselves)."""
    sentences = list(sentences)
    n = len(sentences)
    return {
        DEFAULT_SIGNATURE: {INPUT_NAME: sentences},
        NBEST_SIGNATURE: {INPUT_NAME: sentences, NBEST_K_NAME: [k] * n},
        SAMPLE_SIGNATURE: {INPUT_NAME: sentences, TEMPERATURE_NAME: [1.0] * n,
                           TOP_K_NAME: [0] * n, TOP_P_NAME: [1.0] * n, SEED_NAME: list(range(n))},
        PREFIX_SIGNATURE: {INPUT_NAME: sentences,
                           PREFIXES_NAME: list(prefixes) if prefixes is not None else [""] * n},
        ALIGN_SIGNATURE: {INPUT_NAME: sentences},
        DOCUMENT_SIGNATURE: {INPUT_NAME: sentences},
        SCORE_SIGNATURE: {INPUT_NAME: sentences,
                          TARGETS_NAME: list(targets) if targets is not None else sentences},
    }


def run_in_memory(translator: Translator, calls: dict[str, dict[str, list]],
                  functions: dict[str, Any] | None = None) -> dict[str, dict[str, list]]:
    """`calls` made on the in-memory Translator (through `functions`, signature name -> its
    function, when given: the concrete functions the export saves): answers as
    `run_in_fresh_process` gives them."""
    functions = functions or translator.signature_functions()
    answers = {}
    for signature, inputs in calls.items():
        outputs = functions[signature](*[
            tf.constant(inputs[name], tf.as_dtype(INPUT_DTYPES[name]))
            for name in SIGNATURE_INPUTS[signature]])
        answers[signature] = {
            name: [v.decode("utf-8") if isinstance(v, bytes) else v
                   for v in tensor.numpy().ravel().tolist()] for name, tensor in outputs.items()}
    return answers


def translate_in_fresh_process(export_dir: str | os.PathLike, sentences: Iterable[str],
                               python: str = sys.executable, timeout: float = 600, *,
                               k: int = 1) -> dict[str, list]:
    """Loads the export in a new `python` process (tensorflow + tensorflow_text only) and calls
    its `serving_default` and its `translate_nbest` with `k`.

    Returns:
        {"translations": [...], "scores": [...], "nbest_translations": [[k texts], ...],
        "nbest_scores": [[k scores], ...], "modules": tfformer modules seen (none)}.
    """
    sentences = list(sentences)
    calls = check_calls(sentences, k)
    got = run_in_fresh_process(export_dir, {name: calls[name] for name in
                                            (DEFAULT_SIGNATURE, NBEST_SIGNATURE)},
                               python, timeout)
    nbest = got[NBEST_SIGNATURE]
    rows = lambda values: [values[i:i + k] for i in range(0, len(values), k)]  # noqa: E731
    return {"translations": got[DEFAULT_SIGNATURE][OUTPUT_TRANSLATIONS],
            "scores": got[DEFAULT_SIGNATURE][OUTPUT_SCORES],
            "nbest_translations": rows(nbest[OUTPUT_TRANSLATIONS]),
            "nbest_scores": rows(nbest[OUTPUT_SCORES]), "modules": got["modules"]}


def traced_for_saving(translator: Translator) -> dict[str, Any]:
    """Signature name -> the concrete function `tf.saved_model.save` saves for it.

    TensorFlow keys a tf.function's traces by, among others, whether they were made under a
    save context (`function_context.make_function_context`), so a signature traced outside
    `tf.saved_model.save` is traced again inside it: each search graph twice. Traced here under
    the context `tf.saved_model.save(options=None)` enters, the save finds these traces, and
    the export's in-memory check runs the very graphs it saves.
    """
    from tensorflow.python.saved_model import save_context

    with save_context.save_context(tf.saved_model.SaveOptions()):
        return {name: function.get_concrete_function()
                for name, function in translator.signature_functions().items()}


def export_saved_model(translator: Translator, model_base_path: str | os.PathLike, name: str,
                       version: int, *, check_sentences: Sequence[str] = ()) -> str:
    """Writes `model_base_path/name/version/` (the layout TF Serving watches) and checks it.

    Signatures: `serving_default` and `translate` (the best hypothesis), `translate_nbest` (the
    k best), `translate_sample`, `translate_prefix` and `translate_align` (see
    `tfformer.contract`). Warmup: one
    request per signature on the first check sentences (an empty sentence without them) in
    `assets.extra/` (`tfformer.export.warmup`), which TF Serving and `tfformer-serve` replay
    before the version serves. Checks: every op is one stock TF Serving has (`check_ops`),
    and, for `check_sentences`, a fresh process that imports only tensorflow and
    tensorflow_text translates exactly as the in-memory `translator` does, through every
    signature (the whole n-best list, samples, prefixes; `score` of the translations within
    SCORE_TOLERANCE). A failed check removes nothing but
    raises ExportError, and the version directory is only renamed into place once it passed,
    so TF Serving never loads it.

    Returns:
        the version directory.
    """
    if not isinstance(version, int) or version < 1:
        raise ValueError(f"version must be a positive integer, got {version!r}")
    if not name or os.sep in name:
        raise ValueError(f"name must be a plain directory name, got {name!r}")
    final_dir = os.path.join(model_base_path, name, str(version))
    if os.path.exists(final_dir):
        raise FileExistsError(f"{final_dir} exists: versions are immutable, pick a new one")
    # TF Serving polls for integer directory names: write under a name it ignores.
    staging_dir = os.path.join(model_base_path, name, f".tmp-{version}-{os.getpid()}")
    signatures = traced_for_saving(translator)
    # TF logs every captured input it renames (one line of hundreds of names) through absl.
    absl_logger = logging.getLogger("absl")
    level = absl_logger.level
    absl_logger.setLevel(max(level, logging.ERROR))
    try:
        tf.saved_model.save(translator, staging_dir, signatures=signatures)
    finally:
        absl_logger.setLevel(level)
    check_ops(staging_dir)
    warmup_calls = check_calls(list(check_sentences[:WARMUP_SENTENCES]) or [""],
                               translator.beam_size)
    warmup_calls[TRANSLATE_SIGNATURE] = warmup_calls[DEFAULT_SIGNATURE]
    write_warmup_requests(staging_dir, warmup_requests(
        name, {signature: warmup_calls[signature] for signature in SIGNATURE_NAMES}))
    if check_sentences:
        with FreshProcess(staging_dir) as fresh:  # it imports and loads while this one checks
            # The prefixes: the first word of each translation, as an autocompletion would
            # send, cut well within the prefix limit in pieces (an undertrained model's first
            # "word" may be a whole translation without spaces).
            calls = check_calls(check_sentences, translator.beam_size)
            expected = run_in_memory(translator, {DEFAULT_SIGNATURE: calls[DEFAULT_SIGNATURE]},
                                     signatures)
            longest = translator.max_prefix_pieces // 2
            translations = expected[DEFAULT_SIGNATURE][OUTPUT_TRANSLATIONS]
            calls[PREFIX_SIGNATURE][PREFIXES_NAME] = [text.split(" ")[0][:longest]
                                                      for text in translations]
            calls[SCORE_SIGNATURE][TARGETS_NAME] = scoreable(translator, translations)
            expected.update(run_in_memory(translator, {signature: inputs for signature, inputs
                                                       in calls.items()
                                                       if signature != DEFAULT_SIGNATURE},
                                          signatures))
            got = fresh.answers(calls)
        for signature in calls:
            if signature != SCORE_SIGNATURE:
                _check_same(check_sentences, expected[signature][OUTPUT_TRANSLATIONS],
                            got[signature][OUTPUT_TRANSLATIONS], f" ({signature})")
        _check_scores(check_sentences, expected[SCORE_SIGNATURE], got[SCORE_SIGNATURE])
        _check_same(check_sentences, expected[ALIGN_SIGNATURE][OUTPUT_ALIGNMENTS],
                    got[ALIGN_SIGNATURE][OUTPUT_ALIGNMENTS], f" ({ALIGN_SIGNATURE} alignments)")
    os.rename(staging_dir, final_dir)
    return final_dir


def scoreable(translator: Translator, texts: Sequence[str]) -> list[str]:
    """The texts, each cut to the whole words that fit the longest target `score` takes
    (re-tokenized, an undertrained model's translation may exceed it)."""
    limit = scoring.max_target_pieces(translator.model.transformer_config)
    if limit is None:
        return list(texts)

    def fits(words):
        pieces = translator.tokenizer.tokenize(tf.constant([" ".join(words)]))
        return int(pieces.row_lengths()[0]) <= limit

    kept = []
    for text in texts:
        words = text.split(" ")
        while words and not fits(words):
            words = words[:-1]
        kept.append(" ".join(words))
    return kept


def _check_scores(sentences: Sequence[str], expected: dict, got: dict) -> None:
    """The reloaded `score` gives the in-memory lengths, and log-probabilities within
    SCORE_TOLERANCE."""
    _check_same(sentences, expected[OUTPUT_LENGTHS], got[OUTPUT_LENGTHS], f" ({SCORE_SIGNATURE} "
                f"{OUTPUT_LENGTHS})")
    worst = max((abs(a - b) for a, b in zip(expected[OUTPUT_TOKEN_SCORES],
                                            got[OUTPUT_TOKEN_SCORES])), default=0.0)
    if not math.isfinite(worst) or worst > SCORE_TOLERANCE:
        raise ExportError(f"the reloaded export's {SCORE_SIGNATURE} differs from the in-memory "
                          f"Translator's by up to {worst:.3g} (tolerance {SCORE_TOLERANCE})")


def _check_same(sentences: Sequence[str], expected: list, got: list, what: str = "") -> None:
    if got != expected:
        per = max(len(expected) // max(len(sentences), 1), 1)  # n-best: k values a sentence
        expected, got = ([values[i:i + per] for i in range(0, len(values), per)]
                         for values in (expected, got))
        raise ExportError(
            f"the reloaded export translates differently from the in-memory Translator{what}:\n"
            + "\n".join(f"  {s!r}: {a!r} != {b!r}" for s, a, b in zip(sentences, expected, got)
                         if a != b))
