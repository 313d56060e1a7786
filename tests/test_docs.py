"""The READMEs cannot rot: every fenced block of README.md, training/README.md and
serving/README.md is executed here, or listed as excepted with the reason.

`REGISTRY` holds, per file and in document order, the exact text of every fenced block and how
it runs:

* `Sh`: each command of the block (`\\` continuations joined, comment lines skipped) runs through
  `bash -c` with its `Cmd`: substitutions (each must match the command exactly once), flags
  appended before the trailing comment, and a check of what the command did, not only its exit
  status. A `Cmd(serve=True)` starts in the background on a free port and answers before the next
  command runs; "{server}" in a substitution is the address of the server started last, "{rest}"
  its REST API's (`--rest-api-port`), "{free_port}" a port nothing listens on.
* `Py`: the snippet, after its substitutions, runs with `.venv/bin/python`, followed in the same
  process by checks of the objects it promises.
* `Excepted`: not executed (Docker and its TF Serving, output examples, a diagram); the
  reason is given, and some are checked statically.

The fast tests fail when a block is added, removed or changed without updating the registry, when
a substitution no longer matches, and when an inline `tfformer-... ARGS` command of the prose is
neither in an executed block nor whitelisted. The slow tests run each README's blocks in document
order in one work directory laid out like the repository root (`.venv` and `training/` linked,
small data files written by the test, a fake `../shared/data/bible-es-en/`, a fake
`tensorflow_datasets` on PYTHONPATH: tests/fake_tfds/), since later blocks use earlier outputs:
train -> evaluate -> export -> serve -> translate. The settings are small: short runs, and a few
sentences of the built-in corpus as data.
"""

from __future__ import annotations

import csv
import dataclasses
import difflib
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

from tfformer.data.builtin import builtin_pairs

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("README.md", "training/README.md", "serving/README.md")
FAKE_TFDS = Path(__file__).resolve().parent / "fake_tfds"
FAKE_TFDS_SIZES = {"train": 48, "validation": 6}  # tests/fake_tfds/tensorflow_datasets

# The small data the READMEs' commands read, written into the work directory by the test.
TRAIN_PAIRS, DEV_PAIRS, TEST_PAIRS = 24, 4, 6
BIBLE_TRAIN_PAIRS, BIBLE_DEV_PAIRS = 48, 6
INPUT_LINES = ["Hola.", "", "Una hermana visita el puente azul."]  # a blank line is translated too

# ---------------------------------------------------------------------------------------------
# Markdown: fenced blocks and inline code spans
# ---------------------------------------------------------------------------------------------

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


@dataclasses.dataclass(frozen=True)
class Fenced:
    lang: str
    text: str
    line: int  # of the opening fence, 1-based
    indented: bool


def parse_markdown(markdown: str) -> tuple[list[Fenced], str]:
    """The fenced blocks of a Markdown text, and the text outside them (the prose)."""
    blocks, prose = [], []
    lines = markdown.split("\n")
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            prose.append(lines[i])
            i += 1
            continue
        fence = opening["fence"]
        closing = re.compile(rf"[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*")
        end = i + 1
        while end < len(lines) and not closing.fullmatch(lines[end]):
            end += 1
        if end == len(lines):
            raise ValueError(f"line {i + 1}: fenced block never closed")
        info = opening["info"].strip()
        blocks.append(Fenced(info.split()[0] if info else "", "\n".join(lines[i + 1:end]),
                             i + 1, bool(opening["indent"])))
        i = end + 1
    return blocks, "\n".join(prose)


INLINE_CODE = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
INLINE_COMMAND = re.compile(r"([A-Z_]+=\S*\s+)*(\.venv/bin/)?tfformer-[a-z]+\s+\S")


def normalized(command: str) -> str:
    """One line, single spaces, without the `.venv/bin/` prefix of the console scripts."""
    return " ".join(command.replace("\\\n", " ").replace(".venv/bin/", "").split())


def inline_commands(prose: str) -> list[str]:
    """Inline code spans of the prose that are a `tfformer-*` command with arguments."""
    spans = (" ".join(match.group(2).split()) for match in INLINE_CODE.finditer(prose))
    return [span for span in spans if INLINE_COMMAND.match(span)]


# ---------------------------------------------------------------------------------------------
# Shell commands: comments, continuations, appended flags
# ---------------------------------------------------------------------------------------------


def comment_start(line: str) -> int:
    """Index of the `#` that starts the line's shell comment (outside quotes, at the start or
    after whitespace), or len(line)."""
    quote = None
    escaped = False
    for i, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return i
    return len(line)


def split_commands(text: str) -> list[str]:
    """The commands of a shell block: lines joined by `\\` continuations, blank and comment-only
    lines left out; each command keeps its lines (and comments) as written."""
    commands, current = [], []
    for line in text.split("\n"):
        code = line[:comment_start(line)].rstrip()
        if not current and not code:
            continue
        current.append(line)
        if not code.endswith("\\"):
            commands.append("\n".join(current))
            current = []
    if current:
        raise ValueError(f"block ends inside a \\ continuation: {current}")
    return commands


def append_flags(command: str, flags: str) -> str:
    """Adds `flags` at the end of the command's last line, before its trailing comment."""
    lines = command.split("\n")
    cut = comment_start(lines[-1])
    code, comment = lines[-1][:cut].rstrip(), lines[-1][cut:]
    lines[-1] = f"{code} {flags}" + (f"  {comment}" if comment else "")
    return "\n".join(lines)


def substitute(text: str, subs: dict[str, str], where: str) -> str:
    for old, new in subs.items():
        count = text.count(old)
        if count != 1:
            pytest.fail(f"{where}: substitution {old!r} matches {count} times, not exactly once; "
                        f"update REGISTRY in tests/test_docs.py to the README\n{text}")
        text = text.replace(old, new)
    return text


# ---------------------------------------------------------------------------------------------
# The registry's kinds of blocks
# ---------------------------------------------------------------------------------------------

Check = Callable[["DocRun", subprocess.CompletedProcess], None]


@dataclasses.dataclass
class Cmd:
    """How one command of an `Sh` block runs (see the module docstring)."""

    check: Check | None = None
    subs: dict[str, str] = dataclasses.field(default_factory=dict)
    append: str = ""
    serve: bool = False

    def prepare(self, command: str, where: str) -> str:
        command = substitute(command, self.subs, where)
        return append_flags(command, self.append) if self.append else command


@dataclasses.dataclass
class Sh:
    text: str
    commands: list[Cmd]
    lang: str = "sh"

    def prepared(self, where: str) -> list[tuple[Cmd, str]]:
        commands = split_commands(self.text)
        if len(commands) != len(self.commands):
            pytest.fail(f"{where}: {len(commands)} commands in the block, {len(self.commands)} "
                        f"in the registry\n{self.text}")
        return [(spec, spec.prepare(command, f"{where}, command {i + 1}"))
                for i, (spec, command) in enumerate(zip(self.commands, commands))]

    def run(self, doc: "DocRun", where: str) -> None:
        for spec, command in self.prepared(where):
            command = doc.fill(command)
            if spec.serve:
                result = doc.start_server(command, where)
            else:
                result = doc.shell(command, where)
            if spec.check is not None:
                spec.check(doc, result)


@dataclasses.dataclass
class Py:
    text: str
    check: str  # Python run after the snippet, in the same process
    subs: dict[str, str] = dataclasses.field(default_factory=dict)
    lang: str = "python"

    def prepared(self, where: str) -> str:
        return substitute(self.text, self.subs, where)

    def run(self, doc: "DocRun", where: str) -> None:
        doc.python(doc.fill(self.prepared(where)) + "\n\n# checks (tests/test_docs.py)\n"
                   + self.check, where)


@dataclasses.dataclass
class Excepted:
    lang: str
    text: str
    reason: str
    check: Callable[[str], None] | None = None  # a static check of the text (fast test)

    def run(self, doc: "DocRun", where: str) -> None:
        pass


# ---------------------------------------------------------------------------------------------
# Running a README in a work directory
# ---------------------------------------------------------------------------------------------


def write_pairs(path: Path, pairs) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{source}\t{target}\n" for source, target in pairs),
                    encoding="utf-8")


@dataclasses.dataclass
class Server:
    process: subprocess.Popen
    address: str
    where: str
    rest: str = ""  # the REST API's HOST:PORT, when started with --rest-api-port


class DocRun:
    """A work directory laid out like the repository root, and the servers started in it."""

    def __init__(self, tmp_path: Path):
        venv_bin = Path(sys.prefix) / "bin"
        for script in ("tfformer-train", "tfformer-serve", "tfformer-translate"):
            if not (venv_bin / script).exists():
                pytest.fail(f"{venv_bin / script} missing: `make test` installs the console "
                            "scripts (pip install -e .)")
        self.tmp = tmp_path
        self.work = tmp_path / "repo"
        self.work.mkdir()
        (self.work / ".venv").symlink_to(sys.prefix, target_is_directory=True)
        (self.work / "training").symlink_to(ROOT / "training", target_is_directory=True)
        write_pairs(self.work / "train.tsv", builtin_pairs("train", TRAIN_PAIRS))
        write_pairs(self.work / "dev.tsv", builtin_pairs("dev", DEV_PAIRS))
        test = builtin_pairs("test", TEST_PAIRS)
        write_pairs(self.work / "test.tsv", test)
        (self.work / "test.es").write_text("".join(s + "\n" for s, _ in test), encoding="utf-8")
        (self.work / "test.en").write_text("".join(t + "\n" for _, t in test), encoding="utf-8")
        (self.work / "input.txt").write_text("".join(line + "\n" for line in INPUT_LINES),
                                             encoding="utf-8")
        # The shared corpus beside the work directory, as ../shared/ is beside the checkout.
        bible = tmp_path / "shared" / "data" / "bible-es-en"
        write_pairs(bible / "train.tsv", builtin_pairs("train", BIBLE_TRAIN_PAIRS, seed=1))
        write_pairs(bible / "dev.tsv", builtin_pairs("dev", BIBLE_DEV_PAIRS, seed=1))
        self.tfds_log = tmp_path / "tfds.log"
        self.logs = tmp_path / "logs"
        self.logs.mkdir()
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self.env = {**env, "PATH": f"{self.work / '.venv' / 'bin'}{os.pathsep}{env['PATH']}",
                    "PYTHONPATH": str(FAKE_TFDS), "FAKE_TFDS_LOG": str(self.tfds_log),
                    "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONDONTWRITEBYTECODE": "1"}
        self.servers: list[Server] = []
        self.snippets = 0
        self.timings: list[tuple[float, str]] = []  # seconds, command (printed at the end)

    def path(self, relative: str) -> Path:
        return self.work / relative

    def fill(self, text: str) -> str:
        if "{server}" in text or "{rest}" in text:
            running = [s for s in self.servers if s.process.poll() is None]
            assert running, f"no server is running for {text!r}"
            assert running[-1].rest or "{rest}" not in text, f"no REST API for {text!r}"
            text = text.replace("{server}", running[-1].address)
            text = text.replace("{rest}", running[-1].rest)
        if "{free_port}" in text:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                text = text.replace("{free_port}", str(sock.getsockname()[1]))
        return text

    def _failed(self, where: str, what: str, result) -> str:
        return (f"{where}: exit status {result.returncode}\n$ {what}\n--- stdout\n"
                f"{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-5000:]}")

    def _timed(self, what: str, started: float) -> None:
        self.timings.append((time.monotonic() - started, what.split("\n")[0][:90]))

    def shell(self, command: str, where: str) -> subprocess.CompletedProcess:
        started = time.monotonic()
        result = subprocess.run(["bash", "-c", "set -eo pipefail\n" + command], cwd=self.work,
                                env=self.env, capture_output=True, text=True, timeout=600)
        self._timed(command, started)
        assert result.returncode == 0, self._failed(where, command, result)
        return result

    def python(self, code: str, where: str) -> subprocess.CompletedProcess:
        self.snippets += 1
        script = self.logs / f"snippet-{self.snippets}.py"
        script.write_text(code, encoding="utf-8")
        started = time.monotonic()
        result = subprocess.run([str(self.work / ".venv" / "bin" / "python"), str(script)],
                                cwd=self.work, env=self.env, capture_output=True, text=True,
                                timeout=600)
        self._timed(f"python snippet ({where})", started)
        assert result.returncode == 0, self._failed(where, f"python {script}", result)
        return result

    def start_server(self, command: str, where: str) -> subprocess.CompletedProcess:
        """Starts the command in the background (exec: SIGTERM reaches the server itself) and
        waits for its "listening on ADDRESS" line and a ready gRPC channel (and with
        --rest-api-port, for its "REST API listening on ADDRESS" line)."""
        import grpc

        started = time.monotonic()
        log = self.logs / f"server-{len(self.servers) + 1}.log"
        with open(log, "w") as stderr:
            process = subprocess.Popen(["bash", "-c", "exec " + command], cwd=self.work,
                                       env=self.env, stdout=subprocess.PIPE, stderr=stderr,
                                       text=True)
        server = Server(process, "", where)
        self.servers.append(server)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in process.stdout],
                         daemon=True).start()

        def next_line(timeout: float) -> str:
            try:
                return lines.get(timeout=timeout)
            except queue.Empty:
                return ""

        first = next_line(180)
        found = re.search(r"listening on (\S+)", first)
        assert found, f"{where}: {command!r} did not start:\n{first}{log.read_text()[-5000:]}"
        server.address = found.group(1)
        if "--rest-api-port" in command:
            second = next_line(30)
            found = re.search(r"REST API listening on (\S+)", second)
            assert found, f"{where}: {command!r} printed no REST API line:\n{second}"
            server.rest = found.group(1)
            first += second
        channel = grpc.insecure_channel(server.address)
        try:
            grpc.channel_ready_future(channel).result(timeout=60)
        finally:
            channel.close()
        self._timed(command + " (until it answers)", started)
        return subprocess.CompletedProcess(command, 0, first, "")

    def stop_servers(self) -> None:
        """SIGTERM to every server; each must exit with status 0."""
        for server in self.servers:
            server.process.send_signal(signal.SIGTERM)
        for server in self.servers:
            status = server.process.wait(timeout=60)
            assert status == 0, f"{server.where}: the server exited with {status} on SIGTERM"

    def finish(self) -> None:
        """Kills the servers still running and prints the time of each command (pytest -s)."""
        for server in self.servers:
            if server.process.poll() is None:
                server.process.kill()
                server.process.wait()
        for seconds, what in self.timings:
            print(f"{seconds:6.1f} s  {what}")

    def run_doc(self, doc: str) -> None:
        blocks, _ = parse_markdown((ROOT / doc).read_text(encoding="utf-8"))
        assert [(b.lang, b.text) for b in blocks] == \
            [(e.lang, e.text.rstrip("\n")) for e in REGISTRY[doc]], \
            f"{doc} differs from REGISTRY: see test_every_fenced_block_is_in_the_registry_in_order"
        for block, entry in zip(blocks, REGISTRY[doc]):
            entry.run(self, f"{doc}:{block.line}")


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------


def is_file(path: Path) -> bool:
    """Whether `path` is a file; a missing one fails the assertion naming it."""
    assert path.is_file(), f"{path} is missing"
    return True


def last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def metrics(run_dir: Path) -> list[tuple[int, int]]:
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and "dev_bleu" in rows[0] and "val_loss" in rows[0], rows
    return [(int(row["epoch"]), int(row["step"])) for row in rows]


def checkpoints(run_dir: Path) -> list[str]:
    return sorted(os.listdir(run_dir / "checkpoints"))


def ckpt(epoch: int) -> str:
    return f"ckpt-{epoch:05d}.weights.h5"


def tfds_loads(doc: DocRun) -> set[str]:
    return set(doc.tfds_log.read_text().splitlines()) if doc.tfds_log.exists() else set()


def output_lines(count: int) -> Check:
    def check(doc: DocRun, result: subprocess.CompletedProcess) -> None:
        lines = result.stdout.split("\n")
        assert lines[-1] == "" and len(lines) - 1 == count, \
            f"expected {count} output line(s), got {result.stdout!r}"
    return check


# The base model with 1 + 1 layers: its 6 + 6 take 45 s more to trace on this CPU. The widths
# stay the paper's base (d_model 512, 8 heads, d_ff 2048).
BASE_ONE_LAYER = "--set num_encoder_layers=1 --set num_decoder_layers=1"


def is_base_model_of_one_layer(config: dict) -> bool:
    return (config["d_model"], config["num_heads"], config["d_ff"], config["num_encoder_layers"],
            config["num_decoder_layers"]) == (512, 8, 2048, 1, 1)


def check_default_train(doc: DocRun, result) -> None:
    run = doc.path("runs/tiny-builtin")
    assert last_json(result.stdout)["steps"] == 5
    assert "Sample translations (dev, beam search):" in result.stdout
    assert metrics(run) == [(epoch, epoch) for epoch in range(1, 6)]
    assert checkpoints(run) == [ckpt(epoch) for epoch in range(1, 6)]
    assert read_json(run / "config.json")["d_model"] == 128  # the tiny preset
    assert read_json(run / "data.json")["spec"] == "builtin"
    assert is_file(run / "model.keras") and is_file(run / "tokenizer.model")


def check_base_train(doc: DocRun, result) -> None:
    run = doc.path("runs/base")
    assert is_base_model_of_one_layer(read_json(run / "config.json"))
    assert read_json(run / "data.json")["spec"] == "tsv:train.tsv,dev.tsv"
    assert read_json(run / "train_args.json")["batch_tokens"] == 256
    assert metrics(run) == [(1, 1)]
    assert is_file(run / "model.keras")
    shutil.rmtree(run)  # 1.5 GB of weights, optimizer state and checkpoints


def check_tfds_train(doc: DocRun, result) -> None:
    run = doc.path("runs/tiny-ted")
    name = "ted_hrlr_translate/pt_to_en"
    assert {f"{name} train", f"{name} validation"} <= tfds_loads(doc)
    assert read_json(run / "data.json")["spec"] == f"tfds:{name}"
    # The dev set is the (fake) validation split.
    validation = builtin_pairs("dev", FAKE_TFDS_SIZES["validation"])
    assert (run / "dev_sources.txt").read_text().splitlines() == [s for s, _ in validation]
    assert metrics(run) == [(1, 2)]
    assert is_file(run / "model.keras")


def check_average5(doc: DocRun, result) -> None:
    assert is_file(doc.path("runs/tiny-builtin/model-avg5.keras"))
    assert ", ".join(ckpt(epoch) for epoch in range(1, 6)) in result.stderr


def check_eval_tsv(doc: DocRun, result) -> None:
    report = read_json(doc.path("eval/report.json"))
    assert report == last_json(result.stdout)
    assert report["test_set"] == "test.tsv" and report["sentences"] == TEST_PAIRS
    assert isinstance(report["bleu"], float) and isinstance(report["chrf"], float)
    assert report["bleu_signature"].startswith("nrefs:1|")
    assert report["weights"] == "model.keras" and report["search"]["beam_size"] == 4
    hypotheses = doc.path("eval/hypotheses.txt").read_text(encoding="utf-8").split("\n")
    assert len(hypotheses) == TEST_PAIRS + 1 and hypotheses[-1] == ""


def check_eval_average(doc: DocRun, result) -> None:
    report = last_json(result.stdout)
    assert report["weights"] == "average of " + ", ".join(ckpt(e) for e in range(1, 6))
    assert report["sentences"] == TEST_PAIRS and isinstance(report["bleu"], float)


def check_export(doc: DocRun, result) -> None:
    assert last_json(result.stdout) == {"export_dir": "models/tfformer/1", "version": 1,
                                        "precision": "fp32",
                                        "check_sentences": "runs/tiny-builtin/dev_sources.txt"}
    version = doc.path("models/tfformer/1")
    assert is_file(version / "saved_model.pb") and (version / "variables").is_dir()


def check_eval_export(doc: DocRun, result) -> None:
    report = last_json(result.stdout)
    assert (report["kind"], report["search"]) == ("saved_model", "as exported")
    assert report["sentences"] == TEST_PAIRS and isinstance(report["bleu"], float)


def check_ctranslate2(name: str, quantization: str) -> Check:
    """A CTranslate2 model directory `name`, checked by the export against the model."""
    def check(doc: DocRun, result) -> None:
        report = last_json(result.stdout)
        assert (report["export_dir"], report["quantization"]) == (name, quantization), report
        assert report["weights"] == "runs/tiny-builtin/model.keras", report
        assert sorted(os.listdir(doc.path(name))) == [
            "config.json", "model.bin", "shared_vocabulary.json", "tokenizer.model"]
        if quantization == "none":
            assert report["max_log_prob_difference"] < 1e-3, report
    return check


def check_scores(count: int) -> Check:
    """`count` lines of SCORE<TAB>TRANSLATION, SCORE a float."""
    def check(doc: DocRun, result) -> None:
        output_lines(count)(doc, result)
        for line in result.stdout.splitlines():
            score, tab, _ = line.partition("\t")
            assert tab and float(score) <= 0, f"not SCORE<TAB>TEXT: {line!r}"
    return check


def check_nbest(k: int) -> Check:
    """`k` lines of SCORE<TAB>TRANSLATION (one sentence's n-best list), best first."""
    def check(doc: DocRun, result) -> None:
        check_scores(k)(doc, result)
        scores = [float(line.partition("\t")[0]) for line in result.stdout.splitlines()]
        assert scores == sorted(scores, reverse=True), f"not best first: {result.stdout!r}"
    return check


def check_output_tsv(doc: DocRun, result) -> None:
    assert result.stdout == ""
    output = doc.path("output.tsv").read_text(encoding="utf-8")
    check_scores(len(INPUT_LINES))(doc, subprocess.CompletedProcess("", 0, output, ""))


def check_bible_train(doc: DocRun, result) -> None:
    run = doc.path("runs/bible")
    settings = read_json(run / "train_args.json")
    # The recipe's settings, with the flags appended by the test on top.
    assert settings["data"] == ("tsv:../shared/data/bible-es-en/train.tsv,"
                                "../shared/data/bible-es-en/dev.tsv")
    assert (settings["batch_tokens"], settings["vocab_size"], settings["max_minutes"]) == \
        (2048, 8000, 30)
    assert (settings["steps"], settings["steps_per_epoch"]) == (6, 2)
    assert read_json(run / "config.json")["d_model"] == 128  # the tiny preset
    assert metrics(run) == [(1, 2), (2, 4), (3, 6)]
    assert checkpoints(run) == [ckpt(1), ckpt(2), ckpt(3)]
    assert is_file(run / "model.keras")


def check_bible_average(doc: DocRun, result) -> None:
    assert is_file(doc.path("runs/bible/model-avg3.keras"))
    assert ", ".join(ckpt(epoch) for epoch in (1, 2, 3)) in result.stderr


def check_bible_evaluate(doc: DocRun, result) -> None:
    report = last_json(result.stdout)
    assert report["test_set"] == "../shared/data/bible-es-en/dev.tsv"
    assert report["sentences"] == BIBLE_DEV_PAIRS and isinstance(report["bleu"], float)
    assert report["weights"] == "average of " + ", ".join(ckpt(e) for e in (1, 2, 3))


def check_wmt14_base(doc: DocRun, result) -> None:
    run = doc.path("runs/base")
    assert {"wmt14_translate/de-en train", "wmt14_translate/de-en validation"} <= tfds_loads(doc)
    assert read_json(run / "data.json")["spec"] == "reverse:tfds:wmt14_translate/de-en"
    # reverse: the (fake) validation split's targets are the sources.
    validation = builtin_pairs("dev", FAKE_TFDS_SIZES["validation"])
    assert (run / "dev_sources.txt").read_text().splitlines() == [t for _, t in validation]
    config = read_json(run / "config.json")
    assert is_base_model_of_one_layer(config) and config["dropout"] == 0.1
    settings = read_json(run / "train_args.json")
    assert (settings["grad_accum"], settings["mixed_precision"]) == (4, "bf16")
    assert metrics(run) == [(1, 1)]
    assert is_file(run / "model.keras")
    shutil.rmtree(run)  # the base model's weights, optimizer state and checkpoints


def check_models_config_excerpt(text: str) -> None:
    """The excerpt is serving/models.config without its comments (same tokens)."""
    config = "\n".join(line for line in (ROOT / "serving/models.config").read_text().split("\n")
                       if not line.lstrip().startswith("#"))
    assert text.split() == config.split(), "serving/README.md's excerpt of models.config differs"


def check_rest_answer(text: str) -> None:
    from tfformer.contract import OUTPUT_SCORES, OUTPUT_TRANSLATIONS

    prediction = json.loads(text)["predictions"][0]
    assert set(prediction) == {OUTPUT_TRANSLATIONS, OUTPUT_SCORES}


LOCAL_REST = {"127.0.0.1:8501": "{rest}"}  # the REST API of the server started last


def check_rest_status(doc: DocRun, result) -> None:
    (status,) = json.loads(result.stdout)["model_version_status"]
    assert (status["state"], status["status"]["error_code"]) == ("AVAILABLE", "OK"), status


def check_rest_metadata(doc: DocRun, result) -> None:
    from tfformer.contract import INPUT_NAME, SIGNATURE_NAMES

    signatures = json.loads(result.stdout)["metadata"]["signature_def"]["signature_def"]
    assert set(signatures) == set(SIGNATURE_NAMES), signatures
    assert signatures[SIGNATURE_NAMES[0]]["inputs"][INPUT_NAME]["dtype"] == "DT_STRING"


def check_rest_predictions(count: int) -> Check:
    def check(doc: DocRun, result) -> None:
        predictions = json.loads(result.stdout)["predictions"]
        assert len(predictions) == count, predictions
        for prediction in predictions:
            check_rest_answer(json.dumps({"predictions": [prediction]}))
            assert isinstance(prediction["translations"], str) and prediction["scores"] <= 0
    return check


def check_rest_outputs(doc: DocRun, result) -> None:
    from tfformer.contract import OUTPUT_SCORES, OUTPUT_TRANSLATIONS

    outputs = json.loads(result.stdout)["outputs"]
    assert set(outputs) == {OUTPUT_TRANSLATIONS, OUTPUT_SCORES}, outputs
    assert len(outputs[OUTPUT_TRANSLATIONS]) == len(outputs[OUTPUT_SCORES]) == 1, outputs


def check_rest_nbest(doc: DocRun, result) -> None:
    """One sentence's 2 best: [[text, text]] and [[score, score]], best first."""
    from tfformer.contract import OUTPUT_SCORES, OUTPUT_TRANSLATIONS

    outputs = json.loads(result.stdout)["outputs"]
    (texts,), (scores,) = outputs[OUTPUT_TRANSLATIONS], outputs[OUTPUT_SCORES]
    assert len(texts) == len(scores) == 2 and all(isinstance(t, str) for t in texts), outputs
    assert 0 >= scores[0] >= scores[1], outputs


# ---------------------------------------------------------------------------------------------
# The registry: every fenced block of the three files, in document order
# ---------------------------------------------------------------------------------------------

TRAIN_SMALL = "--steps 5 --steps-per-epoch 1 --dev-sentences 2"  # 5 checkpoints for --average 5

REGISTRY: dict[str, list] = {
    "README.md": [
        Excepted("sh", """\
make demo   # creates .venv, installs tfformer, trains the tiny preset on the built-in corpus
            # (5-8 min on 2 CPU cores), exports it, translates over gRPC
make test   # creates .venv (+ a TF 2.20 venv for the serving-compatibility check), runs every test
""", reason="`make test` is what CI runs (.ci/run); `make demo` trains 400 steps (5-8 minutes) "
            "and runs what the blocks below run with small settings: tfformer-train with no "
            "arguments, tfformer-export, a translation over gRPC through the local server"),
        Sh("""\
.venv/bin/tfformer-train                                   # tiny preset, built-in data, 400 steps
.venv/bin/tfformer-train --config base --data tsv:train.tsv,dev.tsv --out runs/base \\
    --epochs 10 --batch-tokens 25000                       # the paper's base model
.venv/bin/tfformer-train --data tfds:ted_hrlr_translate/pt_to_en \\
    --out runs/tiny-ted                                    # needs `pip install -e .[tfds]`
""", [
            Cmd(check_default_train, append=TRAIN_SMALL),
            # One update: the base model's 25000-token step does not fit in 24 GB on a CPU.
            Cmd(check_base_train, append=BASE_ONE_LAYER,
                subs={"--epochs 10": "--steps 1", "--batch-tokens 25000": "--batch-tokens 256"}),
            Cmd(check_tfds_train, append="--steps 2 --steps-per-epoch 2 --dev-sentences 2"),
        ]),
        Excepted("sh", """\
.venv/bin/pip install -e '.[jax]'                           # JAX for the CPU (pinned)
.venv/bin/tfformer-train --backend jax --out runs/tiny-jax  # or KERAS_BACKEND=jax tfformer-train
.venv/bin/tfformer-export runs/tiny-jax --model-base-path models --name tfformer-jax
""", reason="make test installs the jax extra; tests/test_jax_training.py runs tfformer-train "
            "--backend jax (killed with -9, resumed) and exports that run with the TensorFlow "
            "path, with small settings: a JAX run here would repeat it in this test"),
        Sh("""\
.venv/bin/tfformer-average runs/tiny-builtin --last 5      # -> runs/tiny-builtin/model-avg5.keras
.venv/bin/tfformer-evaluate runs/tiny-builtin --data test.tsv --beam-size 4 --out eval/
.venv/bin/tfformer-evaluate runs/tiny-builtin --average 5 --src test.es --ref test.en
""", [Cmd(check_average5), Cmd(check_eval_tsv), Cmd(check_eval_average)]),
        Sh("""\
.venv/bin/tfformer-export runs/tiny-builtin --model-base-path models \\
    --name tfformer                                          # -> models/tfformer/N
.venv/bin/tfformer-evaluate models/tfformer --data test.tsv  # the export, searched as exported
.venv/bin/tfformer-serve --model-base-path models/tfformer   # TF Serving stand-in, 127.0.0.1:8500
.venv/bin/tfformer-translate "Los tres perros rojos comen manzanas verdes."
echo "Una hermana visita el puente azul." | .venv/bin/tfformer-translate --scores
.venv/bin/tfformer-translate --saved-model models/tfformer "Hola."   # in process, no server
""", [
            Cmd(check_export),
            Cmd(check_eval_export),
            Cmd(serve=True, append="--port 0"),  # kept running for serving/README.md
            Cmd(output_lines(1), append="--server {server}"),
            Cmd(check_scores(1), append="--server {server}"),
            Cmd(output_lines(1)),
        ]),
        Sh("""\
.venv/bin/tfformer-export runs/tiny-builtin --format ctranslate2 --out ct2-model
.venv/bin/tfformer-export runs/tiny-builtin --format ctranslate2 --out ct2-int8 \\
    --quantization int8                                      # int8 weights, ~1/4 the size
""", [Cmd(check_ctranslate2("ct2-model", "none")), Cmd(check_ctranslate2("ct2-int8", "int8"))]),
        Py("""\
import ctranslate2
import sentencepiece

sp = sentencepiece.SentencePieceProcessor(model_file="ct2-model/tokenizer.model")
translator = ctranslate2.Translator("ct2-model", device="cpu")
results = translator.translate_batch(
    [sp.encode("Los tres perros rojos comen manzanas verdes.", out_type=str)],
    beam_size=4, length_penalty=0.6,
    min_decoding_length=0, suppress_sequences=[["<pad>"], ["<s>"]])  # as our search
print(sp.decode(results[0].hypotheses[0]))
""", check="""\
assert len(results) == 1 and isinstance(sp.decode(results[0].hypotheses[0]), str)
assert "</s>" not in results[0].hypotheses[0] and "<pad>" not in results[0].hypotheses[0]
"""),
        Py("""\
import tfformer
from tfformer.data.batching import make_dataset
from tfformer.data.builtin import builtin_pairs
from tfformer.decode.search import beam_search
from tfformer.data.tokenizer import Tokenizer

pairs = builtin_pairs("train", 2000)      # (Spanish, English) strings; files: tfformer.data.sources
tokenizer = Tokenizer.train([text for pair in pairs for text in pair], vocab_size=2000)  # §5.1
dataset, info = make_dataset(pairs, tokenizer, batch_tokens=2048, max_length=64)
# elements: ((source_ids, target_in_ids), target_out_ids), batched by length (§5.1)

config = tfformer.get_preset("tiny", vocab_size=tokenizer.vocab_size)   # or "base", "big" (Table 3)
model = tfformer.Transformer(config)
tfformer.compile_transformer(model)      # label-smoothed loss (§5.4), Adam + Noam schedule (§5.3)
model.fit(dataset, epochs=1)
model.save("model.keras")

source_ids = tokenizer.encode_source(["Los tres perros rojos comen manzanas verdes."]).to_tensor()
tokens, scores = beam_search(model, source_ids, beam_size=4, alpha=0.6)  # [1, 1, T], [1, 1]
print(tokenizer.detokenize(tokens[:, 0]).numpy(), scores.numpy())

# A whole resumable, kill-safe run from Python (what tfformer-train does):
from tfformer import run
from tfformer.train.settings import TrainSettings
result = run.train("runs/mine", "tiny", TrainSettings(steps=400))       # rerun: continues
exported = run.export("runs/mine", model_base_path="models")            # models/tfformer/N
""", subs={"steps=400": "steps=4, dev_sentences=2",
           "model.fit(dataset, epochs=1)": "model.fit(dataset, epochs=1, steps_per_epoch=4)"},
        check="""\
import os
assert info.num_pairs == len(pairs) == 2000 and model.optimizer.iterations.numpy() == 4
assert tokens.shape[:2] == (1, 1) and scores.shape == (1, 1) and os.path.isfile("model.keras")
assert result.step == 4 and os.path.isfile("runs/mine/model.keras")
assert exported.version == 2 and exported.export_dir == os.path.join("models", "tfformer", "2")
assert os.path.isfile(os.path.join(exported.export_dir, "saved_model.pb"))
"""),
        Excepted("", """\
tfformer/cli/          train  average  export  serve  translate  demo      (parse, log, exit)
      |                           |                 |         |
      v                           v                 v         v
tfformer/run.py        train() average() export()   tfformer/serving/: server -> service ->
      |   (run_steps.py, settings.py)                  requests, versions; client
      v                     |                                  |
tfformer/export.py  <-------+      (SavedModel writer, op-set and fresh-process checks)
      |                                                        |
      v                                                        v
tfformer/translator.py (tokenizer + model + search)    tfformer/contract.py (signature and
      |                                                 tensor names, version-directory rule)
      v
tfformer/training.py  run_state.py  callbacks.py  tokenizer.py  data/  distribute.py
                      checkpoints.py  backends.py  files.py  plots.py  attention_maps.py
      |
      v
tfformer/model.py  search.py  eager_search.py  layers/  losses.py  schedule.py  config.py
                   (layers/kernels.py: the backend-specific fast forms)          run_dir.py
                                                                                 validate.py
""", reason="a diagram of the package layout (tests/test_layout.py checks the imports)"),
    ],
    "training/README.md": [
        Sh("""\
TF_ENABLE_ONEDNN_OPTS=1 .venv/bin/tfformer-train --recipe training/configs/bible-es-en-cpu.json \\
    --out runs/bible                                      # stops after 30 minutes (max_minutes)
.venv/bin/tfformer-average runs/bible --last 3           # -> runs/bible/model-avg3.keras
.venv/bin/tfformer-evaluate runs/bible --average 3 --data ../shared/data/bible-es-en/dev.tsv
.venv/bin/tfformer-train --recipe training/configs/wmt14-en-de-base.json --out runs/base \\
    --grad-accum 4                                        # 2 GPUs: keep ~25k tokens per update
""", [
            Cmd(check_bible_train, append="--steps 6 --steps-per-epoch 2 --dev-sentences 2"),
            Cmd(check_bible_average),
            Cmd(check_bible_evaluate),
            # One update of 4 micro-batches, which must fit in 24 GB on a CPU.
            Cmd(check_wmt14_base, append="--steps 1 --steps-per-epoch 4 --batch-tokens 256 "
                                         "--dev-sentences 1 " + BASE_ONE_LAYER),
        ]),
        Py("""\
from tfformer import run
from tfformer.train.settings import Recipe, load_config

recipe = Recipe.load("training/configs/bible-es-en-cpu.json")
result = run.train("runs/bible", load_config(recipe.config, **recipe.overrides), recipe.train)
averaged = run.average("runs/bible", last=recipe.average_last)   # runs/bible/model-avg3.keras
""", subs={
            # The commands above trained runs/bible to update 6: continue it to update 8.
            "from tfformer import run": "import dataclasses\n\nfrom tfformer import run",
            "recipe.train)": "dataclasses.replace(recipe.train, steps=8, steps_per_epoch=2, "
                             "dev_sentences=2))",
        }, check="""\
import os
assert recipe.average_last == 3 and recipe.config == "tiny"
assert result.step == 8 and [row["step"] for row in result.history] == [2, 4, 6, 8]
assert averaged == os.path.join("runs/bible", "model-avg3.keras") and os.path.isfile(averaged)
assert os.path.getmtime(averaged) > os.path.getmtime("runs/bible/checkpoints/ckpt-00003.weights.h5")
"""),
    ],
    "serving/README.md": [
        Excepted("", """\
model_config_list {
  config { name: "tfformer" base_path: "/models/tfformer" model_platform: "tensorflow" }
}
""", reason="an excerpt of serving/models.config (checked to have the file's tokens)",
            check=check_models_config_excerpt),
        Excepted("sh", """\
docker compose -f serving/docker-compose.yml up -d    # gRPC on 8500, REST on 8501
docker compose -f serving/docker-compose.yml logs -f  # until "Successfully loaded servable version"
""", reason="Docker: no Docker and no tensorflow_model_server here or in CI; the server that "
            "README.md's tfformer-serve started stands in for it on the next gRPC block"),
        Excepted("sh", """\
docker run --rm -p 127.0.0.1:8500:8500 -p 127.0.0.1:8501:8501 \\
  -v "$PWD/models:/models:ro" -v "$PWD/serving/models.config:/config/models.config:ro" \\
  tensorflow/serving:2.21.0 --model_config_file=/config/models.config \\
  --file_system_poll_wait_seconds=1
""", reason="Docker (see above)"),
        Excepted("sh", """\
curl -s http://127.0.0.1:8501/v1/models/tfformer
curl -s -X POST http://127.0.0.1:8501/v1/models/tfformer:predict \\
  -d '{"signature_name": "serving_default", "instances": ["hola mundo"]}'
""", reason="TF Serving's REST port 8501 in Docker (see above); the same calls run against "
            "tfformer-serve --rest-api-port below"),
        Excepted("json", """\
{"predictions": [{"translations": "hello world", "scores": -1.73}]}
""", reason="the answer of the REST call above (checked: valid JSON with the export's output "
            "names)", check=check_rest_answer),
        Sh("""\
tfformer-translate --server 127.0.0.1:8500 "hola mundo"
""", [Cmd(output_lines(1), subs={"127.0.0.1:8500": "{server}"})]),
        Sh("""\
tfformer-serve --model-base-path models/tfformer \\
    --rest-api-port 8501                  # or: python -m tfformer.cli.serve ...
""", [Cmd(serve=True, append="--port 0",
          subs={"--rest-api-port 8501": "--rest-api-port {free_port}"})]),
        Sh("""\
curl -s http://127.0.0.1:8501/v1/models/tfformer                # {"model_version_status": [...]}
curl -s http://127.0.0.1:8501/v1/models/tfformer/metadata       # the signatures
curl -s -X POST http://127.0.0.1:8501/v1/models/tfformer:predict \\
  -d '{"instances": ["hola mundo", "buenos días"]}'             # {"predictions": [{...}, {...}]}
curl -s -X POST http://127.0.0.1:8501/v1/models/tfformer:predict \\
  -d '{"signature_name": "translate", "inputs": ["hola mundo"]}' # {"outputs": {...}}
curl -s -X POST http://127.0.0.1:8501/v1/models/tfformer:predict \\
  -d '{"signature_name": "translate_nbest", "inputs": {"inputs": ["hola mundo"], "k": 2}}'
# {"outputs": {"translations": [["...", "..."]], "scores": [[-1.73, -2.1]]}}
""", [Cmd(check_rest_status, subs=LOCAL_REST), Cmd(check_rest_metadata, subs=LOCAL_REST),
          Cmd(check_rest_predictions(2), subs=LOCAL_REST),
          Cmd(check_rest_outputs, subs=LOCAL_REST), Cmd(check_rest_nbest, subs=LOCAL_REST)]),
        Py("""\
from tfformer.serving.client import translate, TranslationError

translations = translate(["hola mundo"], server="127.0.0.1:8500")
# [Translation(text='hello world', score=-1.73)]; a failed call raises TranslationError
""", subs={'server="127.0.0.1:8500"': 'server="{server}"'}, check="""\
assert len(translations) == 1 and isinstance(translations[0].text, str)
assert isinstance(translations[0].score, float) and translations[0].score <= 0
assert issubclass(TranslationError, Exception)
"""),
        Sh("""\
tfformer-translate "hola mundo" "buenos días"                  # one translation per line
tfformer-translate --scores < input.txt > output.tsv            # stdin: one sentence per line
tfformer-translate --saved-model models/tfformer "hola mundo"   # in process, highest version
tfformer-translate --nbest 3 "hola mundo"                       # the 3 best, SCORE<TAB>TEXT each
""", [
            Cmd(output_lines(2), append="--server {server}"),
            Cmd(check_output_tsv, subs={"--scores <": "--scores --server {server} <"}),
            Cmd(output_lines(1)),
            Cmd(check_nbest(3), append="--server {server}"),
        ]),
    ],
}

# Inline code spans of the prose that are commands with arguments but are not run as written.
INLINE_WHITELIST = {
    "tfformer-export --beam-size --length-penalty --max-output-extra":
        "a list of flags (README.md, Train)",
    "tfformer-train --recipe FILE":
        "a synopsis: FILE is a placeholder; training/README.md's block runs real recipes",
    "tfformer-export runs/tiny-builtin --precision bf16":
        "tests/test_export.py runs tfformer-export --precision bf16 and checks the export's "
        "dtypes; here it would add an export to this test for no other check",
}


# ---------------------------------------------------------------------------------------------
# Fast tests: the registry matches the files
# ---------------------------------------------------------------------------------------------


def _read_blocks(doc: str) -> tuple[list[Fenced], str]:
    return parse_markdown((ROOT / doc).read_text(encoding="utf-8"))


def _describe(lang: str, text: str) -> list[str]:
    return [f"```{lang}", *text.split("\n"), "```"]


@pytest.mark.parametrize("doc", DOCS)
def test_every_fenced_block_is_in_the_registry_in_order(doc):
    blocks, _ = _read_blocks(doc)
    assert not [b.line for b in blocks if b.indented], \
        f"{doc}: fenced blocks must start at column 0 (tests/test_docs.py runs them)"
    found = [line for b in blocks for line in _describe(b.lang, b.text)]
    registered = [line for e in REGISTRY[doc] for line in _describe(e.lang, e.text.rstrip("\n"))]
    if found != registered:
        diff = "\n".join(difflib.unified_diff(registered, found, "REGISTRY (tests/test_docs.py)",
                                              doc, lineterm=""))
        pytest.fail(f"{doc}'s fenced blocks differ from the registry in tests/test_docs.py: "
                    f"register how each new or changed block runs\n{diff}")


@pytest.mark.parametrize("doc", DOCS)
def test_every_registered_block_prepares_and_excepted_blocks_are_checked(doc):
    for block, entry in zip(_read_blocks(doc)[0], REGISTRY[doc]):
        where = f"{doc}:{block.line}"
        if isinstance(entry, Sh):
            for spec, command in entry.prepared(where):
                assert not spec.serve or command.startswith((".venv/bin/", "tfformer-")), \
                    f"{where}: a server command runs under exec, without a VAR= prefix"
        elif isinstance(entry, Py):
            compile(entry.prepared(where) + "\n" + entry.check, where, "exec")
        else:
            assert entry.reason, f"{where}: an excepted block needs its reason"
            if entry.check is not None:
                entry.check(block.text)


def test_inline_commands_are_executed_or_whitelisted():
    executed = [normalized(entry.text) for doc in DOCS for entry in REGISTRY[doc]
                if isinstance(entry, (Sh, Py))]
    seen = set()
    for doc in DOCS:
        for command in inline_commands(_read_blocks(doc)[1]):
            seen.add(command)
            assert command in INLINE_WHITELIST or \
                any(normalized(command) in text for text in executed), \
                (f"{doc}: inline command `{command}` is not run by any test: put it in a fenced "
                 "block registered in tests/test_docs.py, or whitelist it there with the reason")
    assert not set(INLINE_WHITELIST) - seen, "stale INLINE_WHITELIST entries"


def test_shell_helpers_split_commands_and_append_before_comments():
    text = ("A=1 cmd 'x # y' \\\n    --flag   # comment\n# only a comment\n\n"
            "echo \"#no\" | other  # c\n")
    assert split_commands(text) == ["A=1 cmd 'x # y' \\\n    --flag   # comment",
                                    'echo "#no" | other  # c']
    assert append_flags(split_commands(text)[0], "--x 1") == \
        "A=1 cmd 'x # y' \\\n    --flag --x 1  # comment"
    assert append_flags("cmd a#b", "--x") == "cmd a#b --x"
    with pytest.raises(pytest.fail.Exception, match="matches 2 times"):
        substitute("a a", {"a": "b"}, "here")


LINK = re.compile(r"\]\(([^)\s]+)\)")
COLAB = "https://colab.research.google.com/github/tfformer/tfformer/blob/main/"


def test_links_point_to_files_of_the_repository():
    """Relative links, and the "Open in Colab" links (notebooks on GitHub's main branch)."""
    for doc in DOCS:
        for target in LINK.findall(_read_blocks(doc)[1]):
            if target.startswith(COLAB):
                path = ROOT / target[len(COLAB):]
            elif "://" in target or target.startswith(("#", "mailto:")):
                continue
            else:
                path = (ROOT / doc).parent / target.split("#")[0]
            assert path.exists(), f"{doc}: the link {target} points to no file of the repository"


# ---------------------------------------------------------------------------------------------
# Slow tests: each README's blocks, in document order
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_readme_and_serving_readme_run_as_written(tmp_path):
    """README.md, then serving/README.md on README.md's export and server."""
    doc = DocRun(tmp_path)
    try:
        doc.run_doc("README.md")
        doc.run_doc("serving/README.md")
        doc.stop_servers()
    finally:
        doc.finish()


@pytest.mark.slow
def test_training_readme_runs_as_written(tmp_path):
    doc = DocRun(tmp_path)
    try:
        doc.run_doc("training/README.md")
        doc.stop_servers()
    finally:
        doc.finish()
