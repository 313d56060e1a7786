"""tfformer-translate: translate with the exported model over TF Serving's gRPC API, or in
process with --saved-model. Sentences come from the arguments or, when there are none, one per
line from stdin; translations go to stdout one per line, in order (with --nbest K, K lines
'SCORE<TAB>TRANSLATION' per sentence, best first). --sample draws a translation
(translate_sample: --temperature, --top-k, --top-p, --seed); --prefix TEXT makes every
translation start with TEXT (translate_prefix); --alignments adds each translation's word
alignment, 'TRANSLATION<TAB>ALIGNMENT' (translate_align: Pharaoh "i-j" pairs of source and
target pieces).

Exit status: 0; 2 for bad input (a sentence the model refuses, an unknown model, signature or
SavedModel path, invalid UTF-8); 1 when the translation fails at run time (server unreachable,
a deadline exceeded)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Iterator, Optional, Sequence

from tfformer.cli.console import import_tensorflow, start_logging
from tfformer.contract import (
    ALIGN_SIGNATURE,
    DEFAULT_SIGNATURE,
    DOCUMENT_SIGNATURE,
    INPUT_DEFAULTS,
    NBEST_K_NAME,
    NBEST_SIGNATURE,
    PREFIX_SIGNATURE,
    PREFIXES_NAME,
    SAMPLE_SIGNATURE,
    SEED_NAME,
    TEMPERATURE_NAME,
    TOP_K_NAME,
    TOP_P_NAME,
)
from tfformer.decode.batch_translate import translate_in_batches
from tfformer.serving.defaults import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MODEL,
    DEFAULT_SERVER,
    DEFAULT_TIMEOUT,
)

# gRPC codes of a request refused for what it asked: exit 2, as for any bad input.
REFUSED_REQUEST = ("INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION")


def _stdin_lines() -> Iterator[str]:
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text stream without bytes underneath (e.g. io.StringIO)
        for line in sys.stdin:
            yield line.rstrip("\r\n")
        return
    yield from _decoded(stream, lambda number: f"stdin line {number} is")


def _file_lines(path: str) -> Iterator[str]:
    with open(path, "rb") as f:
        yield from _decoded(f, lambda number: f"{path}:{number}:")


def _decoded(stream, where) -> Iterator[str]:
    """The lines of a byte stream as text; ValueError at one that is not UTF-8, `where` its
    number naming it."""
    for number, raw in enumerate(stream, start=1):
        try:
            yield raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as error:
            raise ValueError(f"{where(number)} not valid UTF-8 ({error.reason} at byte "
                             f"{error.start})") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfformer-translate",
        description="Translate sentences with the tfformer model served by TF Serving (gRPC), or "
                    "in process with --saved-model. Without SENTENCE arguments, translates stdin "
                    "line by line; prints one translation per line, in order.")
    parser.add_argument("sentences", nargs="*", metavar="SENTENCE", help="sentences to translate")
    parser.add_argument("--server", default=DEFAULT_SERVER, metavar="HOST:PORT",
                        help="TF Serving gRPC address (default %(default)s)")
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help="model name on the server (default %(default)s)")
    parser.add_argument("--signature", default=None,
                        help=f"signature to call (default {DEFAULT_SIGNATURE}; "
                             f"{NBEST_SIGNATURE} with --nbest)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help="deadline of each request (default %(default)s)")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, metavar="N",
                        help="sentences per request (default %(default)s)")
    parser.add_argument("--scores", action="store_true",
                        help="print 'SCORE<TAB>TRANSLATION' instead of the translation alone")
    parser.add_argument("--nbest", type=int, default=None, metavar="K",
                        help="print the K best translations of each sentence, best first, as K "
                             "lines 'SCORE<TAB>TRANSLATION' (1 <= K <= the export's beam size)")
    parser.add_argument("--sample", action="store_true",
                        help=f"sample each translation ({SAMPLE_SIGNATURE}) instead of searching")
    parser.add_argument("--temperature", type=float, default=INPUT_DEFAULTS[TEMPERATURE_NAME],
                        help="with --sample: divides the log-probabilities (> 0; default "
                             "%(default)s)")
    parser.add_argument("--top-k", type=int, default=INPUT_DEFAULTS[TOP_K_NAME], metavar="K",
                        help="with --sample: draw from the K likeliest pieces (default "
                             "%(default)s: all)")
    parser.add_argument("--top-p", type=float, default=INPUT_DEFAULTS[TOP_P_NAME], metavar="P",
                        help="with --sample: draw from the likeliest pieces that hold "
                             "probability P (in (0, 1]; default %(default)s: all)")
    parser.add_argument("--seed", type=int, default=INPUT_DEFAULTS[SEED_NAME],
                        help="with --sample: the same seed and sentence give the same sample "
                             "(>= 0; default %(default)s)")
    parser.add_argument("--prefix", default=None, metavar="TEXT",
                        help=f"every translation starts with TEXT and continues it "
                             f"({PREFIX_SIGNATURE}); the score is the continuation's")
    parser.add_argument("--alignments", action="store_true",
                        help=f"print 'TRANSLATION<TAB>ALIGNMENT' ({ALIGN_SIGNATURE}): for each "
                             f"target piece, the source piece it attends to most, as 'i-j' "
                             f"pairs of SentencePiece pieces (Pharaoh format, as fast_align)")
    parser.add_argument("--document", action="store_true",
                        help=f"each line is a document ({DOCUMENT_SIGNATURE}): its sentences "
                             f"are translated as one batch and joined with its own spacing")
    parser.add_argument("--input", metavar="FILE",
                        help="translate the lines of FILE (instead of SENTENCE arguments or "
                             "stdin), with a progress line on stderr")
    parser.add_argument("--output", metavar="FILE",
                        help="write the output to FILE, whole, once every line is translated "
                             "(instead of stdout, line by line)")
    parser.add_argument("--target-language", metavar="CODE",
                        help="a multilingual model's target language: each sentence starts "
                             "with the token >>CODE<< (as OPUS-MT's multilingual models take "
                             "it, e.g. fra)")
    parser.add_argument("--saved-model", metavar="DIR",
                        help="translate in process with this SavedModel (a version dir, or a "
                             "model base path whose highest version is used) instead of a server")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    start_logging(logging.WARNING, "%(levelname)s %(name)s: %(message)s")
    if args.batch_size < 1:
        parser.error("--batch-size must be at least 1")
    if args.nbest is not None and args.nbest < 1:
        parser.error("--nbest must be at least 1")
    modes = [flag for flag, given in (("--nbest", args.nbest is not None),
                                      ("--sample", args.sample),
                                      ("--prefix", args.prefix is not None),
                                      ("--alignments", args.alignments),
                                      ("--document", args.document)) if given]
    if len(modes) > 1:
        parser.error(f"{' and '.join(modes)} call different signatures: choose one")
    sampling = {TEMPERATURE_NAME: args.temperature, TOP_K_NAME: args.top_k,
                TOP_P_NAME: args.top_p, SEED_NAME: args.seed}
    sampling_flags = [f"--{name.replace('_', '-')}" for name, value in sampling.items()
                      if value != INPUT_DEFAULTS[name]]
    if sampling_flags and not args.sample:
        parser.error(f"{', '.join(sampling_flags)} need --sample")
    nbest = args.nbest
    mode = modes[0] if modes else ""
    signature = args.signature or {"--nbest": NBEST_SIGNATURE, "--sample": SAMPLE_SIGNATURE,
                                   "--prefix": PREFIX_SIGNATURE,
                                   "--alignments": ALIGN_SIGNATURE,
                                   "--document": DOCUMENT_SIGNATURE}.get(mode, DEFAULT_SIGNATURE)
    # The signature's inputs besides the sentences.
    inputs = {"--nbest": {NBEST_K_NAME: nbest}, "--sample": sampling,
              "--prefix": {PREFIXES_NAME: args.prefix}}.get(mode, {})
    prog = parser.prog
    if args.input and args.sentences:
        parser.error("give SENTENCE arguments or --input FILE, not both")
    total = None
    if args.input:
        try:
            lines = list(_file_lines(args.input))
        except (OSError, ValueError) as error:
            print(f"{prog}: error: {error}", file=sys.stderr)
            return 2
        total = len(lines)
    else:
        lines = iter(args.sentences) if args.sentences else _stdin_lines()
    if args.target_language is not None:
        if not args.target_language or any(c.isspace() or c in "<>" for c in args.target_language):
            parser.error(f"--target-language takes a code such as fra, got "
                         f"{args.target_language!r}")
        lines = (f">>{args.target_language}<< {line}" for line in lines)

    # gRPC and TF Serving's protos: not for --help. TensorFlow only for --saved-model, so that
    # a client of a server starts without it.
    import grpc

    from tfformer.serving.client import (
        TranslationError,
        load_saved_model,
        translate,
        translate_saved_model,
    )

    refused_in_process: tuple[type[Exception], ...] = ()  # errors that mean bad input, in process
    channel = None
    try:
        if args.saved_model:
            import_tensorflow()
            import tensorflow as tf

            refused_in_process = (tf.errors.InvalidArgumentError,)
            model = load_saved_model(args.saved_model)

            def run(batch):
                return translate_saved_model(batch, model, signature, args.batch_size, **inputs)
        else:
            channel = grpc.insecure_channel(args.server)

            def run(batch):
                return translate(batch, args.server, args.model, signature, args.timeout,
                                 channel, batch_size=args.batch_size, **inputs)

        if args.output:  # before the translation, which an unwritable --output would waste
            from tfformer.cli.evaluate import check_writable

            check_writable(os.path.dirname(os.path.abspath(args.output)))
        written: list[str] = []
        done = 0
        for batch in translate_in_batches(run, lines, args.batch_size):
            out = []
            for translations in batch:
                done += 1
                if args.document:
                    out.append(translations.text)
                    for index, parts in enumerate(translations.splits, 1):
                        if parts > 1:
                            print(f"{prog}: line {done}: sentence {index} is longer than the "
                                  f"model takes: translated in {parts} parts", file=sys.stderr)
                    continue
                for translation in translations if nbest else [translations]:
                    fields = [translation.text]
                    if args.scores or nbest:
                        fields.insert(0, f"{translation.score:.6g}")
                    if args.alignments:
                        fields.append(translation.alignment)
                    out.append("\t".join(fields))
            if args.output:
                written.extend(out)
            else:
                print("\n".join(out))
                sys.stdout.flush()
            if total is not None:
                print(f"\r{done}/{total} lines", end="", file=sys.stderr, flush=True)
        if total is not None:
            print(file=sys.stderr)
        if args.output:
            from tfformer.utils.files import atomic_write_text

            atomic_write_text(args.output, "".join(line + "\n" for line in written))
    except TranslationError as error:
        code = error.code.name if error.code else "BAD_RESPONSE"
        where = "" if args.saved_model else f" from {args.server}"
        print(f"{prog}: error: {code}{where}: {error.details}", file=sys.stderr)
        # The request was refused (a bad sentence, an unknown model or signature): bad input.
        return 2 if code in REFUSED_REQUEST else 1
    except (FileNotFoundError, ValueError, KeyError) as error:  # no such model or signature
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"{prog}: error: {message}", file=sys.stderr)
        return 2
    except refused_in_process as error:  # in process: e.g. --nbest over the beam
        from tfformer.serving.requests import op_error_message

        print(f"{prog}: error: INVALID_ARGUMENT: {op_error_message(error)}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # noqa: BLE001 - e.g. tf.errors.OpError from the in-process model
        print(f"{prog}: error: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    finally:
        if channel is not None:
            channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
