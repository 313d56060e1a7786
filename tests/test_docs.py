"""The docs cannot rot: every fenced block of README.md, training/README.md, serving/README.md
and docs/*.md is executed here, or excepted with the reason.

How a block runs is written in the Markdown itself, in an HTML comment (invisible on GitHub)
just before the block's fence:

    <!-- test: sh
    default_train append="--steps 5 --steps-per-epoch 1"    # one line per command of the block
    output_lines count=1 sub="127.0.0.1:8500 => {server}"
    serve append="--port 0"
    -->
    <!-- test: python check=client sub='server="127.0.0.1:8500" => server="{server}"' -->
    <!-- test: excepted check=rest_answer
    the reason, in words (any number of lines)
    -->

* `sh`: each command of the block (`\\` continuations joined, comment lines skipped) runs through
  `bash -c`, then the check named first on its line (`SH_CHECKS`, with the line's other
  `key=value` words as its arguments) checks what the command did, not only its exit status.
  `run` checks the exit status only; `serve` starts the command in the background on a free port
  and waits until it answers. `sub="OLD => NEW"` (each must match the command exactly once;
  `\\n` in NEW is a newline) and `append="FLAGS"` (added before the trailing comment) adapt the
  command to small settings. "{server}" is the address of the server started last, "{rest}" its
  REST API's (`--rest-api-port`), "{free_port}" a port nothing listens on. A marker line
  starting with `#` is a comment.
* `python`: the snippet, after its `sub=`s, runs with `.venv/bin/python`, followed in the same
  process by the checks `check=NAME` names (`PY_CHECKS`).
* `excepted`: not executed (Docker and its TF Serving, output examples, a diagram); the rest of
  the comment is the reason; `check=NAME` (`EXCEPTED_CHECKS`) checks the text statically.

Editing a doc's prose or a block therefore never means editing this file; only a new kind of
check does. The fast tests fail on a block without a marker, a marker without a block, an unknown
check or argument, a substitution that no longer matches, and an inline `tfformer-... ARGS`
command of the prose that is neither in an executed block nor whitelisted. The slow tests run
each chain of `CHAINS` (docs whose later blocks use what earlier ones left: train -> evaluate ->
export -> serve -> translate) in document order, one test per chain so that pytest-xdist runs
them side by side, each in its own work directory laid out like the repository root (`.venv` and
`training/` linked, small data files written by the test, a fake `../shared/data/bible-es-en/`,
a fake `tensorflow_datasets` on PYTHONPATH: tests/fake_tfds/). The settings are small: short
runs, and a few sentences of the built-in corpus as data.
"""

from __future__ import annotations

import csv
import dataclasses
import inspect
import json
import os
import queue
import re
import shlex
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
DOCS = ("README.md", "training/README.md", "serving/README.md",
        *sorted(f"docs/{page.name}" for page in (ROOT / "docs").glob("*.md")))
# The docs whose blocks run in one work directory, in this order (later blocks use what earlier
# ones left). Each chain is one slow test; a doc with an executed block is in exactly one.
CHAINS = {
    # serving/README.md's commands use README.md's export and server; docs/training.md's first
    # command is README.md's, rerun on the finished run (a rerun continues, here from its last
    # step); docs/deployment.md exports that run.
    "readme": ("README.md", "serving/README.md", "docs/training.md", "docs/deployment.md"),
    "recipes": ("training/README.md",),
    "pretrained": ("docs/pretrained.md",),
}
FAKE_TFDS = Path(__file__).resolve().parent / "fake_tfds"
FAKE_TFDS_SIZES = {"train": 48, "validation": 6}  # tests/fake_tfds/tensorflow_datasets

# The small data the READMEs' commands read, written into the work directory by the test.
TRAIN_PAIRS, DEV_PAIRS, TEST_PAIRS = 24, 4, 6
BIBLE_TRAIN_PAIRS, BIBLE_DEV_PAIRS = 48, 6
INPUT_LINES = ["Hola.", "", "Una hermana visita el puente azul."]  # a blank line is translated too


# ---------------------------------------------------------------------------------------------
# Markdown: fenced blocks, their markers, and the prose
# ---------------------------------------------------------------------------------------------

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
MARKER = re.compile(r"<!--\s*test:(?P<body>.*?)-->", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class Fenced:
    lang: str
    text: str
    line: int  # of the opening fence, 1-based
    indented: bool
    marker: str | None  # the body of the `<!-- test: ... -->` comment just before the fence


@dataclasses.dataclass(frozen=True)
class Page:
    blocks: list[Fenced]
    prose: str  # the text outside the blocks and the markers
    stray_markers: list[int]  # lines of markers that no fence follows


def parse_markdown(markdown: str) -> Page:
    """The fenced blocks of a Markdown text with their markers, and the prose. A marker belongs
    to the fence that follows it with nothing but blank lines between."""
    blocks, prose, stray = [], [], []
    lines = markdown.split("\n")
    pending: tuple[int, str] | None = None  # (line, body) of the last marker
    i = 0
    while i < len(lines):
        if lines[i].lstrip().startswith("<!--"):
            end = i
            while end < len(lines) and "-->" not in lines[end]:
                end += 1
            comment = "\n".join(lines[i:end + 1])
            found = MARKER.fullmatch(comment.strip())
            if found:
                if pending:
                    stray.append(pending[0])
                pending = (i + 1, found["body"])
                i = end + 1
                continue
        opening = FENCE.match(lines[i])
        if not opening:
            if pending and lines[i].strip():
                stray.append(pending[0])
                pending = None
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
                             i + 1, bool(opening["indent"]), pending[1] if pending else None))
        pending = None
        i = end + 1
    if pending:
        stray.append(pending[0])
    return Page(blocks, "\n".join(prose), stray)


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
                        f"update the marker before the block\n{text}")
        text = text.replace(old, new)
    return text


# ---------------------------------------------------------------------------------------------
# The markers: how each block runs
# ---------------------------------------------------------------------------------------------

Check = Callable[..., None]  # (doc: DocRun, result: CompletedProcess, **arguments from the marker)
SH_CHECKS: dict[str, Check] = {}
EXCEPTED_CHECKS: dict[str, Callable[[str], None]] = {}


def sh_check(function: Check) -> Check:
    """Registers a check of a shell command under its name without `check_`."""
    SH_CHECKS[function.__name__.removeprefix("check_")] = function
    return function


def excepted_check(function: Callable[[str], None]) -> Callable[[str], None]:
    """Registers a static check of an excepted block's text under its name without `check_`."""
    EXCEPTED_CHECKS[function.__name__.removeprefix("check_")] = function
    return function


class MarkerError(Exception):
    pass


def options(words: list[str], where: str) -> tuple[dict[str, str], dict[str, str]]:
    """`key=value` words: the substitutions (`sub="OLD => NEW"`, in order) and the others."""
    subs, rest = {}, {}
    for word in words:
        key, equals, value = word.partition("=")
        if not equals:
            raise MarkerError(f"{where}: {word!r} is not key=value")
        if key == "sub":
            old, arrow, new = value.partition(" => ")
            if not arrow or not old:
                raise MarkerError(f"{where}: sub={value!r} is not \"OLD => NEW\"")
            if old in subs:
                raise MarkerError(f"{where}: two substitutions of {old!r}")
            subs[old.replace("\\n", "\n")] = new.replace("\\n", "\n")
        elif key in rest:
            raise MarkerError(f"{where}: {key}= given twice")
        else:
            rest[key] = value
    return subs, rest


def marker_lines(body: str) -> list[str]:
    """The marker's lines after the first, without blank and `#` comment lines."""
    return [line for line in body.split("\n")[1:] if line.strip()
            and not line.lstrip().startswith("#")]


@dataclasses.dataclass
class Cmd:
    """How one command of an `Sh` block runs (see the module docstring)."""

    check: str  # a name of SH_CHECKS, "run" or "serve"
    arguments: dict[str, str] = dataclasses.field(default_factory=dict)
    subs: dict[str, str] = dataclasses.field(default_factory=dict)
    append: str = ""

    @property
    def serve(self) -> bool:
        return self.check == "serve"

    @classmethod
    def parse(cls, line: str, where: str) -> "Cmd":
        words = shlex.split(line, comments=True)
        subs, rest = options(words[1:], where)
        append = rest.pop("append", "")
        command = cls(words[0], rest, subs, append)
        if command.check in ("run", "serve"):
            if rest:
                raise MarkerError(f"{where}: {command.check} takes no arguments, got {rest}")
        elif command.check not in SH_CHECKS:
            raise MarkerError(f"{where}: unknown check {command.check!r}; the checks of "
                              f"tests/test_docs.py are {sorted(SH_CHECKS)}")
        else:
            try:
                inspect.signature(SH_CHECKS[command.check]).bind(None, None, **rest)
            except TypeError as error:
                raise MarkerError(f"{where}: check {command.check!r}: {error}") from None
        return command

    def prepare(self, command: str, where: str) -> str:
        command = substitute(command, self.subs, where)
        return append_flags(command, self.append) if self.append else command

    def verify(self, doc: "DocRun", result: subprocess.CompletedProcess) -> None:
        if self.check not in ("run", "serve"):
            SH_CHECKS[self.check](doc, result, **self.arguments)


@dataclasses.dataclass
class Sh:
    text: str
    commands: list[Cmd]

    def prepared(self, where: str) -> list[tuple[Cmd, str]]:
        commands = split_commands(self.text)
        if len(commands) != len(self.commands):
            pytest.fail(f"{where}: {len(commands)} commands in the block, {len(self.commands)} "
                        f"lines in its marker\n{self.text}")
        return [(spec, spec.prepare(command, f"{where}, command {i + 1}"))
                for i, (spec, command) in enumerate(zip(self.commands, commands))]

    def run(self, doc: "DocRun", where: str) -> None:
        for spec, command in self.prepared(where):
            command = doc.fill(command)
            if spec.serve:
                result = doc.start_server(command, where)
            else:
                result = doc.shell(command, where)
            spec.verify(doc, result)


@dataclasses.dataclass
class Py:
    text: str
    check: str  # a name of PY_CHECKS: Python run after the snippet, in the same process
    subs: dict[str, str] = dataclasses.field(default_factory=dict)

    def prepared(self, where: str) -> str:
        return substitute(self.text, self.subs, where)

    def run(self, doc: "DocRun", where: str) -> None:
        doc.python(doc.fill(self.prepared(where)) + "\n\n# checks (tests/test_docs.py)\n"
                   + PY_CHECKS[self.check], where)


@dataclasses.dataclass
class Excepted:
    text: str
    reason: str
    check: str | None = None  # a name of EXCEPTED_CHECKS

    def run(self, doc: "DocRun", where: str) -> None:
        pass


SH_LANGS = ("sh", "bash")


def block_spec(block: Fenced, where: str) -> Sh | Py | Excepted:
    """What the block's marker says: raises MarkerError when it is missing or malformed."""
    if block.marker is None:
        raise MarkerError(f"{where}: the block has no `<!-- test: ... -->` marker before its "
                          "fence (see tests/test_docs.py's docstring)")
    head = block.marker.split("\n")[0].split()
    kind = head[0] if head else ""
    if kind == "sh":
        if block.lang not in SH_LANGS or len(head) > 1:
            raise MarkerError(f"{where}: `sh` marks a ```sh block, each command on its own line")
        return Sh(block.text, [Cmd.parse(line, where) for line in marker_lines(block.marker)])
    if kind == "python":
        if block.lang != "python":
            raise MarkerError(f"{where}: `python` marks a ```python block")
        words = shlex.split(block.marker.split("\n")[0])[1:] + [
            word for line in marker_lines(block.marker) for word in shlex.split(line)]
        subs, rest = options(words, where)
        check = rest.pop("check", None)
        if rest or check not in PY_CHECKS:
            raise MarkerError(f"{where}: a python marker takes check=NAME (one of "
                              f"{sorted(PY_CHECKS)}) and sub=..., got check={check!r} {rest}")
        return Py(block.text, check, subs)
    if kind == "excepted":
        _, rest = options(head[1:], where)
        check = rest.pop("check", None)
        if rest or (check is not None and check not in EXCEPTED_CHECKS):
            raise MarkerError(f"{where}: an excepted marker takes check=NAME (one of "
                              f"{sorted(EXCEPTED_CHECKS)}), got check={check!r} {rest}")
        reason = " ".join(" ".join(block.marker.split("\n")[1:]).split())
        if not reason:
            raise MarkerError(f"{where}: an excepted block needs its reason")
        return Excepted(block.text, reason, check)
    raise MarkerError(f"{where}: unknown kind {kind!r}: sh, python or excepted")


def read_page(doc: str) -> Page:
    return parse_markdown((ROOT / doc).read_text(encoding="utf-8"))


def specs(doc: str) -> list[tuple[Fenced, Sh | Py | Excepted]]:
    """The blocks of a doc and how each runs (fails the test on a bad marker)."""
    result = []
    for block in read_page(doc).blocks:
        try:
            result.append((block, block_spec(block, f"{doc}:{block.line}")))
        except MarkerError as error:
            pytest.fail(str(error))
    return result


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
        # tests/marian_dir.py makes the small Marian directory docs/pretrained.md imports.
        (self.work / "tests").symlink_to(ROOT / "tests", target_is_directory=True)
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
        for block, spec in specs(doc):
            spec.run(self, f"{doc}:{block.line}")


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


@sh_check
def check_output_lines(doc: DocRun, result, count: str) -> None:
    lines = result.stdout.split("\n")
    assert lines[-1] == "" and len(lines) - 1 == int(count), \
        f"expected {count} output line(s), got {result.stdout!r}"


def is_base_model_of_one_layer(config: dict) -> bool:
    """The paper's base widths (d_model 512, 8 heads, d_ff 2048) with 1 + 1 layers: the docs'
    markers append `--set num_encoder_layers=1 --set num_decoder_layers=1` (6 + 6 layers take
    45 s more to trace on this CPU)."""
    return (config["d_model"], config["num_heads"], config["d_ff"], config["num_encoder_layers"],
            config["num_decoder_layers"]) == (512, 8, 2048, 1, 1)


@sh_check
def check_default_train(doc: DocRun, result) -> None:
    run = doc.path("runs/tiny-builtin")
    assert last_json(result.stdout)["steps"] == 5
    assert "Sample translations (dev, beam search):" in result.stdout
    assert metrics(run) == [(epoch, epoch) for epoch in range(1, 6)]
    assert checkpoints(run) == [ckpt(epoch) for epoch in range(1, 6)]
    assert read_json(run / "config.json")["d_model"] == 128  # the tiny preset
    assert read_json(run / "data.json")["spec"] == "builtin"
    assert is_file(run / "model.keras") and is_file(run / "tokenizer.model")
    assert os.listdir(run / "logs" / "train") and os.listdir(run / "logs" / "validation")
    dev_sources = (run / "dev_sources.txt").read_text(encoding="utf-8").splitlines()
    assert len(dev_sources) == 16 and all(dev_sources)  # the export's check sentences


@sh_check
def check_base_train(doc: DocRun, result) -> None:
    run = doc.path("runs/base")
    assert is_base_model_of_one_layer(read_json(run / "config.json"))
    assert read_json(run / "data.json")["spec"] == "tsv:train.tsv,dev.tsv"
    assert read_json(run / "train_args.json")["batch_tokens"] == 256
    assert metrics(run) == [(1, 1)]
    assert is_file(run / "model.keras")
    shutil.rmtree(run)  # 1.5 GB of weights, optimizer state and checkpoints


@sh_check
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


@sh_check
def check_average5(doc: DocRun, result) -> None:
    assert is_file(doc.path("runs/tiny-builtin/model-avg5.keras"))
    assert ", ".join(ckpt(epoch) for epoch in range(1, 6)) in result.stderr


@sh_check
def check_eval_tsv(doc: DocRun, result) -> None:
    report = read_json(doc.path("eval/report.json"))
    assert report == last_json(result.stdout)
    assert report["test_set"] == "test.tsv" and report["sentences"] == TEST_PAIRS
    assert isinstance(report["bleu"], float) and isinstance(report["chrf"], float)
    assert report["bleu_signature"].startswith("nrefs:1|")
    assert report["weights"] == "model.keras" and report["search"]["beam_size"] == 4
    hypotheses = doc.path("eval/hypotheses.txt").read_text(encoding="utf-8").split("\n")
    assert len(hypotheses) == TEST_PAIRS + 1 and hypotheses[-1] == ""


@sh_check
def check_eval_average(doc: DocRun, result) -> None:
    report = last_json(result.stdout)
    assert report["weights"] == "average of " + ", ".join(ckpt(e) for e in range(1, 6))
    assert report["sentences"] == TEST_PAIRS and isinstance(report["bleu"], float)


@sh_check
def check_export(doc: DocRun, result) -> None:
    assert last_json(result.stdout) == {"export_dir": "models/tfformer/1", "version": 1,
                                        "precision": "fp32",
                                        "check_sentences": "runs/tiny-builtin/dev_sources.txt"}
    version = doc.path("models/tfformer/1")
    assert is_file(version / "saved_model.pb") and (version / "variables").is_dir()


@sh_check
def check_eval_export(doc: DocRun, result) -> None:
    report = last_json(result.stdout)
    assert (report["kind"], report["search"]) == ("saved_model", "as exported")
    assert report["sentences"] == TEST_PAIRS and isinstance(report["bleu"], float)


@sh_check
def check_fine_tuned(doc: DocRun, result, run: str, base: str) -> None:
    """A run `run` fine-tuned from `base`: its record names base's weights by path and SHA-256,
    and it has base's architecture and vocabulary, trained with the continued-training
    schedule."""
    import hashlib

    tuned, started = doc.path(run), doc.path(base)
    recorded = read_json(tuned / "init_from.json")
    assert os.path.samefile(recorded["path"], started), recorded
    weights = Path(recorded["weights"])
    assert recorded["sha256"] == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert read_json(tuned / "config.json") == read_json(started / "config.json")
    vocabulary = "vocabulary.json" if (started / "vocabulary.json").exists() else "tokenizer.model"
    assert (tuned / vocabulary).read_bytes() == (started / vocabulary).read_bytes()
    assert read_json(tuned / "train_args.json")["lr_schedule"] == "inverse_sqrt"
    assert metrics(tuned) == [(1, 2)] and is_file(tuned / "model.keras")


@sh_check
def check_evaluated(doc: DocRun, result, out: str, weights: str) -> None:
    """tfformer-evaluate's report in `out`, on the test set, of `weights`."""
    report = read_json(doc.path(out) / "report.json")
    assert report == last_json(result.stdout)
    assert (report["weights"], report["sentences"]) == (weights, TEST_PAIRS), report
    assert isinstance(report["bleu"], float)


@sh_check
def check_exported(doc: DocRun, result, name: str, run: str) -> None:
    """Version 1 of model `name`, exported from `run` and checked on its dev sources."""
    assert last_json(result.stdout) == {"export_dir": f"models/{name}/1", "version": 1,
                                        "precision": "fp32",
                                        "check_sentences": f"{run}/dev_sources.txt"}
    assert is_file(doc.path(f"models/{name}/1/saved_model.pb"))


@sh_check
def check_ctranslate2(doc: DocRun, result, name: str, quantization: str) -> None:
    """A CTranslate2 model directory `name`, checked by the export against the model."""
    report = last_json(result.stdout)
    assert (report["export_dir"], report["quantization"]) == (name, quantization), report
    assert report["weights"] == "runs/tiny-builtin/model.keras", report
    assert sorted(os.listdir(doc.path(name))) == [
        "config.json", "model.bin", "shared_vocabulary.json", "tokenizer.model"]
    if quantization == "none":
        assert report["max_log_prob_difference"] < 1e-3, report


@sh_check
def check_scores(doc: DocRun, result, count: str) -> None:
    """`count` lines of SCORE<TAB>TRANSLATION, SCORE a float."""
    check_output_lines(doc, result, count)
    for line in result.stdout.splitlines():
        score, tab, _ = line.partition("\t")
        assert tab and float(score) <= 0, f"not SCORE<TAB>TEXT: {line!r}"


@sh_check
def check_nbest(doc: DocRun, result, k: str) -> None:
    """`k` lines of SCORE<TAB>TRANSLATION (one sentence's n-best list), best first."""
    check_scores(doc, result, k)
    scores = [float(line.partition("\t")[0]) for line in result.stdout.splitlines()]
    assert scores == sorted(scores, reverse=True), f"not best first: {result.stdout!r}"


@sh_check
def check_output_tsv(doc: DocRun, result) -> None:
    assert result.stdout == ""
    output = doc.path("output.tsv").read_text(encoding="utf-8")
    check_scores(doc, subprocess.CompletedProcess("", 0, output, ""), str(len(INPUT_LINES)))


@sh_check
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


@sh_check
def check_bible_average(doc: DocRun, result) -> None:
    assert is_file(doc.path("runs/bible/model-avg3.keras"))
    assert ", ".join(ckpt(epoch) for epoch in (1, 2, 3)) in result.stderr


@sh_check
def check_bible_evaluate(doc: DocRun, result) -> None:
    report = last_json(result.stdout)
    assert report["test_set"] == "../shared/data/bible-es-en/dev.tsv"
    assert report["sentences"] == BIBLE_DEV_PAIRS and isinstance(report["bleu"], float)
    assert report["weights"] == "average of " + ", ".join(ckpt(e) for e in (1, 2, 3))


@sh_check
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
    import keras

    import tfformer.model.transformer  # noqa: F401  (registers the classes model.keras names)

    model = keras.models.load_model(run / "model.keras")
    assert model.dtype_policy.name == "mixed_bfloat16"
    assert model.optimizer.gradient_accumulation_steps == 4
    assert int(model.optimizer.iterations) == 1
    shutil.rmtree(run)  # the base model's weights, optimizer state and checkpoints


@excepted_check
def check_models_config_excerpt(text: str) -> None:
    """The excerpt is serving/models.config without its comments (same tokens)."""
    config = "\n".join(line for line in (ROOT / "serving/models.config").read_text().split("\n")
                       if not line.lstrip().startswith("#"))
    assert text.split() == config.split(), "serving/README.md's excerpt of models.config differs"


@excepted_check
def check_rest_answer(text: str) -> None:
    from tfformer.contract import OUTPUT_SCORES, OUTPUT_TRANSLATIONS

    prediction = json.loads(text)["predictions"][0]
    assert set(prediction) == {OUTPUT_TRANSLATIONS, OUTPUT_SCORES}


@sh_check
def check_rest_status(doc: DocRun, result) -> None:
    (status,) = json.loads(result.stdout)["model_version_status"]
    assert (status["state"], status["status"]["error_code"]) == ("AVAILABLE", "OK"), status


@sh_check
def check_rest_metadata(doc: DocRun, result) -> None:
    from tfformer.contract import INPUT_NAME, SIGNATURE_NAMES

    signatures = json.loads(result.stdout)["metadata"]["signature_def"]["signature_def"]
    assert set(signatures) == set(SIGNATURE_NAMES), signatures
    assert signatures[SIGNATURE_NAMES[0]]["inputs"][INPUT_NAME]["dtype"] == "DT_STRING"


@sh_check
def check_rest_predictions(doc: DocRun, result, count: str) -> None:
    predictions = json.loads(result.stdout)["predictions"]
    assert len(predictions) == int(count), predictions
    for prediction in predictions:
        check_rest_answer(json.dumps({"predictions": [prediction]}))
        assert isinstance(prediction["translations"], str) and prediction["scores"] <= 0


@sh_check
def check_rest_outputs(doc: DocRun, result) -> None:
    from tfformer.contract import OUTPUT_SCORES, OUTPUT_TRANSLATIONS

    outputs = json.loads(result.stdout)["outputs"]
    assert set(outputs) == {OUTPUT_TRANSLATIONS, OUTPUT_SCORES}, outputs
    assert len(outputs[OUTPUT_TRANSLATIONS]) == len(outputs[OUTPUT_SCORES]) == 1, outputs


@sh_check
def check_rest_nbest(doc: DocRun, result) -> None:
    """One sentence's 2 best, in the row format: [text, text] and [score, score], best first."""
    from tfformer.contract import OUTPUT_SCORES, OUTPUT_TRANSLATIONS

    (prediction,) = json.loads(result.stdout)["predictions"]
    texts, scores = prediction[OUTPUT_TRANSLATIONS], prediction[OUTPUT_SCORES]
    assert len(texts) == len(scores) == 2 and all(isinstance(t, str) for t in texts), prediction
    assert 0 >= scores[0] >= scores[1], prediction


@sh_check
def check_rest_sample(doc: DocRun, result) -> None:
    """One sample, the same for the same seed: the command run again gives it again."""
    predictions = json.loads(result.stdout)["predictions"]
    check_rest_predictions(doc, result, "1")
    again = subprocess.run(result.args, cwd=doc.work, env=doc.env, capture_output=True,
                           text=True, timeout=60)
    assert json.loads(again.stdout)["predictions"] == predictions


@sh_check
def check_rest_prefix(doc: DocRun, result, prefix: str) -> None:
    check_rest_predictions(doc, result, "1")
    (prediction,) = json.loads(result.stdout)["predictions"]
    assert prediction["translations"].startswith(prefix), prediction


def check_pharaoh(alignment: str) -> None:
    """"i-j" pairs, one for each target piece j = 0, 1, ... in order (tfformer.contract)."""
    pairs = [pair.split("-") for pair in alignment.split(" ")]
    assert all(len(pair) == 2 and pair[0].isdigit() for pair in pairs), alignment
    assert [int(j) for _, j in pairs] == list(range(len(pairs))), alignment


@sh_check
def check_rest_align(doc: DocRun, result) -> None:
    """One translation with its alignment, in the row format."""
    from tfformer.contract import OUTPUT_ALIGNMENTS, OUTPUT_SCORES, OUTPUT_TRANSLATIONS

    (prediction,) = json.loads(result.stdout)["predictions"]
    assert set(prediction) == {OUTPUT_TRANSLATIONS, OUTPUT_SCORES, OUTPUT_ALIGNMENTS}, prediction
    check_pharaoh(prediction[OUTPUT_ALIGNMENTS])


@sh_check
def check_rest_document(doc: DocRun, result) -> None:
    """One document of three sentences, its blank line kept."""
    (prediction,) = json.loads(result.stdout)["predictions"]
    assert prediction["sentences"] == 3 and prediction["splits"] == [1, 1, 1], prediction
    assert prediction["translations"].count("\n\n") == 1, prediction
    assert len(prediction["scores"]) == 3 and all(v <= 0 for v in prediction["scores"])


@sh_check
def check_document(doc: DocRun, result) -> None:
    """One document translated on one line: its three sentences, two spaces kept."""
    check_output_lines(doc, result, "1")
    assert "  " in result.stdout, result.stdout


@sh_check
def check_document_file(doc: DocRun, result) -> None:
    """output.txt: a line per line of input.txt, the blank one blank, nothing on stdout."""
    assert result.stdout == ""
    lines = doc.path("output.txt").read_text(encoding="utf-8").split("\n")
    assert len(lines) == len(INPUT_LINES) + 1 and lines[-1] == "", lines
    assert [bool(line) for line in lines[:-1]] == [bool(line) for line in INPUT_LINES], lines


@sh_check
def check_rest_score(doc: DocRun, result) -> None:
    """One pair's score in the row format: its log P, the mean and |Y| log-probabilities."""
    from tfformer.contract import (
        OUTPUT_LENGTHS,
        OUTPUT_NORMALIZED_SCORES,
        OUTPUT_SCORES,
        OUTPUT_TOKEN_SCORES,
    )

    (prediction,) = json.loads(result.stdout)["predictions"]
    assert set(prediction) == {OUTPUT_SCORES, OUTPUT_NORMALIZED_SCORES, OUTPUT_TOKEN_SCORES,
                               OUTPUT_LENGTHS}, prediction
    tokens = prediction[OUTPUT_TOKEN_SCORES][:prediction[OUTPUT_LENGTHS]]
    assert len(tokens) >= 2 and all(value <= 0 for value in tokens), prediction
    assert abs(sum(tokens) - prediction[OUTPUT_SCORES]) < 1e-4, prediction
    assert abs(prediction[OUTPUT_SCORES] / len(tokens)
               - prediction[OUTPUT_NORMALIZED_SCORES]) < 1e-5, prediction


def pair_scores(doc: DocRun, normalized: bool = False) -> list[float]:
    """The run's score of each pair of the work directory's test.tsv, from the library."""
    from tfformer.decode.translator import load_translator

    lines = (doc.work / "test.tsv").read_text(encoding="utf-8").splitlines()
    pairs = [line.split("\t") for line in lines]
    scored = load_translator(doc.work / "runs" / "tiny-builtin").score_texts(
        [s for s, _ in pairs], [t for _, t in pairs])
    return [normalized_score if normalized else score for score, normalized_score, _ in scored]


@sh_check
def check_score_lines(doc: DocRun, result, tokens: str = "") -> None:
    """A score per test pair, in order: the library's log P (or, with token scores, the mean
    per token, then the pieces' log-probabilities)."""
    check_output_lines(doc, result, str(TEST_PAIRS))
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    want = pair_scores(doc, normalized=bool(tokens))
    for row, score in zip(rows, want):
        assert abs(float(row[0]) - score) < 1e-4, (row, score)
        if tokens:
            values = [float(value) for value in row[1].split()]
            assert len(values) >= 2 and abs(sum(values) / len(values) - score) < 1e-4, row
        else:
            assert len(row) == 1, row


@sh_check
def check_score_file(doc: DocRun, result, path: str) -> None:
    """`path`: the mean log-probability per token of each test pair, in order."""
    got = [float(line) for line in doc.path(path).read_text(encoding="utf-8").splitlines()]
    assert got == pytest.approx(pair_scores(doc, normalized=True), abs=1e-5)


@sh_check
def check_kept_pairs(doc: DocRun, result, fraction: str) -> None:
    """kept.tsv: the likeliest `fraction` of the test pairs (by mean log-probability per
    token), likeliest first."""
    lines = (doc.work / "test.tsv").read_text(encoding="utf-8").splitlines()
    ranked = sorted(zip(pair_scores(doc, normalized=True), lines), reverse=True)
    want = [line for _, line in ranked[:int(len(lines) * float(fraction))]]
    assert 0 < len(want) < len(lines)
    assert (doc.work / "kept.tsv").read_text(encoding="utf-8").splitlines() == want


@sh_check
def check_alignments(doc: DocRun, result) -> None:
    """One line TRANSLATION<TAB>ALIGNMENT."""
    check_output_lines(doc, result, "1")
    translation, alignment = result.stdout.rstrip("\n").split("\t")
    assert translation, result.stdout
    check_pharaoh(alignment)


@sh_check
def check_starts_with(doc: DocRun, result, prefix: str) -> None:
    check_output_lines(doc, result, "1")
    assert result.stdout.startswith(prefix), result.stdout


# Python run after a snippet, in its process: the objects the snippet promises.
PY_CHECKS: dict[str, str] = {
    'keras_api': """\
import os
assert info.num_pairs == len(pairs) == 2000 and model.optimizer.iterations.numpy() == 4
assert tokens.shape[:2] == (1, 1) and scores.shape == (1, 1) and os.path.isfile("model.keras")
assert result.step == 4 and os.path.isfile("runs/mine/model.keras")
assert exported.version == 2 and exported.export_dir == os.path.join("models", "tfformer", "2")
assert os.path.isfile(os.path.join(exported.export_dir, "saved_model.pb"))
""",
    'ctranslate2_snippet': """\
assert len(results) == 1 and isinstance(sp.decode(results[0].hypotheses[0]), str)
assert "</s>" not in results[0].hypotheses[0] and "<pad>" not in results[0].hypotheses[0]
""",
    'recipe_from_python': """\
import os
assert recipe.average_last == 3 and recipe.config == "tiny"
assert result.step == 8 and [row["step"] for row in result.history] == [2, 4, 6, 8]
assert averaged == os.path.join("runs/bible", "model-avg3.keras") and os.path.isfile(averaged)
assert os.path.getmtime(averaged) > os.path.getmtime("runs/bible/checkpoints/ckpt-00003.weights.h5")
""",
    'client': """\
assert len(translations) == 1 and isinstance(translations[0].text, str)
assert isinstance(translations[0].score, float) and translations[0].score <= 0
assert issubclass(TranslationError, Exception)
# Alone or beside another sentence: the same text, the score as request batching keeps it.
assert [len(row) for row in best_two] == [2, 1] and best_two[0][0].text == translations[0].text
assert abs(best_two[0][0].score - translations[0].score) < 1e-5
assert best_two[0][0].score >= best_two[0][1].score
assert samples[0].text == samples[2].text and all(s.score <= 0 for s in samples)
assert abs(samples[0].score - samples[2].score) < 1e-4
assert len(completed) == 1 and completed[0].text.startswith("Hello")
# The translation's own score, and another target's: log P, its mean, |Y| log-probabilities.
assert len(scored) == 2 and scored[0].token_scores != scored[1].token_scores
assert len(documents) == 1 and documents[0].splits == (1, 1, 1)
assert documents[0].text.count("\\n\\n") == 1 and len(documents[0].scores) == 3
assert all(abs(sum(s.token_scores) - s.score) < 1e-4 for s in scored)
assert all(abs(s.score / len(s.token_scores) - s.normalized) < 1e-5 for s in scored)
""",
}

# Inline code spans of the prose that are commands with arguments but are not run as written.
INLINE_WHITELIST = {
    "tfformer-export --no-repeat-ngram N":
        "a synopsis (serving/README.md): tests/test_export.py runs the export program with it "
        "and checks its translations",
    "tfformer-export --beam-size --length-penalty --max-output-extra":
        "a list of flags (README.md, Train)",
    "tfformer-train --recipe FILE":
        "a synopsis: FILE is a placeholder; training/README.md's block runs real recipes",
    "tfformer-export runs/tiny-builtin --precision bf16":
        "tests/test_export.py runs tfformer-export --precision bf16 and checks the export's "
        "dtypes; here it would add an export to this test for no other check",
}


# ---------------------------------------------------------------------------------------------
# Fast tests: every block is marked, every marker is well formed and still matches its block
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("doc", DOCS)
def test_every_fenced_block_is_marked_and_its_marker_prepares(doc):
    page = read_page(doc)
    assert not [b.line for b in page.blocks if b.indented], \
        f"{doc}: fenced blocks must start at column 0 (tests/test_docs.py runs them)"
    assert not page.stray_markers, \
        f"{doc}: `<!-- test: ... -->` markers at lines {page.stray_markers} precede no fence"
    for block, spec in specs(doc):
        where = f"{doc}:{block.line}"
        if isinstance(spec, Sh):
            for command, text in spec.prepared(where):
                assert not command.serve or text.startswith((".venv/bin/", "tfformer-")), \
                    f"{where}: a server command runs under exec, without a VAR= prefix"
        elif isinstance(spec, Py):
            compile(spec.prepared(where) + "\n" + PY_CHECKS[spec.check], where, "exec")
        elif spec.check is not None:
            EXCEPTED_CHECKS[spec.check](block.text)


def test_every_doc_with_executed_blocks_is_in_one_chain():
    chained = [doc for chain in CHAINS.values() for doc in chain]
    assert len(chained) == len(set(chained)) and set(chained) <= set(DOCS), CHAINS
    executed = {doc for doc in DOCS if any(not isinstance(s, Excepted) for _, s in specs(doc))}
    assert executed <= set(chained), \
        f"{sorted(executed - set(chained))}: blocks that run, in no chain of CHAINS"


def test_inline_commands_are_executed_or_whitelisted():
    executed = [normalized(spec.text) for doc in DOCS for _, spec in specs(doc)
                if isinstance(spec, (Sh, Py))]
    seen = set()
    for doc in DOCS:
        for command in inline_commands(read_page(doc).prose):
            seen.add(command)
            assert command in INLINE_WHITELIST or \
                any(normalized(command) in text for text in executed), \
                (f"{doc}: inline command `{command}` is not run by any test: put it in a fenced "
                 "block that runs, or whitelist it in tests/test_docs.py with the reason")
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


def _spec_of(markdown: str) -> Sh | Py | Excepted:
    (block,) = parse_markdown(markdown).blocks
    return block_spec(block, "doc.md")


def test_markers_are_parsed_and_bad_ones_are_caught():
    good = _spec_of('Text.\n\n<!-- test: sh\n# a comment\noutput_lines count=1 '
                    'append="--server {server}"\nserve sub="8500 => 0"\n-->\n'
                    '```sh\ntfformer-translate hi  # c\ntfformer-serve --port 8500\n```\n')
    assert isinstance(good, Sh) and [c.check for c in good.commands] == ["output_lines", "serve"]
    assert [text for _, text in good.prepared("doc.md")] == [
        "tfformer-translate hi --server {server}  # c", "tfformer-serve --port 0"]
    excepted = _spec_of("<!-- test: excepted\nno Docker\nhere -->\n```sh\ndocker ps\n```")
    assert isinstance(excepted, Excepted) and excepted.reason == "no Docker here"
    python = _spec_of("<!-- test: python check=client sub='a => b\\nc' -->\n```python\na\n```")
    assert isinstance(python, Py) and python.prepared("doc.md") == "b\nc"
    for markdown, message in [
        ("```sh\nls\n```", "no `<!-- test: ... -->` marker"),
        ("<!-- test: sh\nno_such_check\n-->\n```sh\nls\n```", "unknown check 'no_such_check'"),
        ("<!-- test: sh\noutput_lines count=1 n=1\n-->\n```sh\nls\n```", "unexpected keyword"),
        ("<!-- test: sh\nrun count=1\n-->\n```sh\nls\n```", "run takes no arguments"),
        ("<!-- test: excepted -->\n```sh\nls\n```", "needs its reason"),
        ("<!-- test: python check=nope -->\n```python\npass\n```", "check='nope'"),
        ("<!-- test: shell\nrun\n-->\n```sh\nls\n```", "unknown kind 'shell'"),
    ]:
        with pytest.raises(MarkerError, match=re.escape(message)):
            _spec_of(markdown)
    stale = _spec_of('<!-- test: sh\nrun sub="--old => --new"\n-->\n```sh\nls --other\n```')
    with pytest.raises(pytest.fail.Exception, match="matches 0 times"):
        stale.prepared("doc.md")
    with pytest.raises(pytest.fail.Exception, match="2 commands in the block, 1 lines"):
        _spec_of("<!-- test: sh\nrun\n-->\n```sh\nls\nls\n```").prepared("doc.md")
    assert parse_markdown("<!-- test: sh\nrun\n-->\nprose\n```sh\nls\n```").stray_markers == [1]


LINK = re.compile(r"\]\(([^)\s]+)\)")
COLAB = "https://colab.research.google.com/github/tfformer/tfformer/blob/main/"


def test_links_point_to_files_of_the_repository():
    """Relative links, and the "Open in Colab" links (notebooks on GitHub's main branch)."""
    for doc in DOCS:
        for target in LINK.findall(read_page(doc).prose):
            if target.startswith(COLAB):
                path = ROOT / target[len(COLAB):]
            elif "://" in target or target.startswith(("#", "mailto:")):
                continue
            else:
                path = (ROOT / doc).parent / target.split("#")[0]
            assert path.exists(), f"{doc}: the link {target} points to no file of the repository"


# ---------------------------------------------------------------------------------------------
# Slow tests: each chain's docs, in document order, in a work directory of its own
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_docs_run_as_written(chain, tmp_path):
    doc = DocRun(tmp_path)
    try:
        for page in CHAINS[chain]:
            doc.run_doc(page)
        doc.stop_servers()
    finally:
        doc.finish()
