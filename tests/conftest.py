"""Shared test setup: quiet TensorFlow logs, deterministic seeds, small model configs."""

import fcntl
import gc
import hashlib
import json
import os
import pathlib
import resource
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The numerical tests compare float32 against NumPy's float32 formulas. On a GPU, JAX's default
# float32 matmul is TF32 (10-bit mantissa: ~1e-3 relative error); ask for true float32 there.
# The CPU computes float32 either way.
os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")
# Under pytest-xdist the workers share the cores: a TensorFlow process per worker (and the
# subprocesses a test starts) with thread pools as wide as the machine would oversubscribe it,
# and its threads would wait on each other's cores. Each gets its share of the cores instead;
# no test's outcome depends on the pool sizes (ops split their work differently, which can
# move float32 sums in their last bits, within every tolerance here).
_CORES_PER_WORKER = max(1, (os.cpu_count() or 1)
                        // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(_CORES_PER_WORKER))
os.environ.setdefault("TF_NUM_INTEROP_THREADS", str(_CORES_PER_WORKER))
# XLA on the CPU (JAX) has no pool size to set, only one thread or the machine's: one, where a
# worker's share is one core.
_ONE_XLA_THREAD = "--xla_cpu_multi_thread_eigen=false"
if _CORES_PER_WORKER == 1 and _ONE_XLA_THREAD not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_ONE_XLA_THREAD}".strip()

import pytest  # noqa: E402


@pytest.fixture
def tiny_config():
    """A model small enough that every numerical test runs in well under a second."""
    from tfformer.config import TransformerConfig

    return TransformerConfig(vocab_size=40, d_model=32, num_heads=4, d_ff=64,
                             num_encoder_layers=2, num_decoder_layers=2, max_length=64,
                             dropout=0.1)


@pytest.fixture(scope="session")
def make_run_dir(tmp_path_factory):
    """Writes a run dir as training leaves it: tokenizer.model (trained on `pairs` built-in
    pairs) + model.keras (random weights of a TransformerConfig with `config`'s fields)."""

    def make(*, seed: int, pairs: int, vocab_size: int, **config):
        import keras

        from tfformer import Transformer, TransformerConfig
        from tfformer.data.builtin import builtin_pairs
        from tfformer.data.tokenizer import Tokenizer

        keras.utils.set_random_seed(seed)  # before the tokenizer's tf-text resource exists
        directory = tmp_path_factory.mktemp("run")
        tokenizer = Tokenizer.train([s for p in builtin_pairs("train", n=pairs) for s in p],
                                    vocab_size)
        tokenizer.save(directory / "tokenizer.model")
        model = Transformer(TransformerConfig(vocab_size=tokenizer.vocab_size, **config))
        model.build()
        model.save(directory / "model.keras")
        return directory

    return make


ROOT = pathlib.Path(__file__).resolve().parent.parent
# The shared trained run: what `run.train` is given (a part of its cache key).
TRAINED_RUN = {
    "config": {"d_model": 64, "num_heads": 4, "d_ff": 128, "num_encoder_layers": 2,
               "num_decoder_layers": 2, "dropout": 0.0, "max_length": 64},
    "settings": {"data": "builtin:2000", "steps": 400, "steps_per_epoch": 400,
                 "batch_tokens": 2048, "vocab_size": 300, "warmup_steps": 200,
                 "dev_sentences": 0, "seed": 21, "verbose": 0},
}


# Code that training never imports (the training side never imports export or serving): a
# change there keeps the shared run. `train_shared_run` checks that this stays true.
TRAINED_RUN_UNKEYED = ("tfformer/cli/", "tfformer/export/", "tfformer/serving/",
                       "tfformer/evaluate.py", "tfformer/contract.py")


def trained_run_code() -> list[pathlib.Path]:
    """The package's modules that can change the shared run's weights."""
    return [path for path in sorted((ROOT / "tfformer").rglob("*.py"))
            if not path.relative_to(ROOT).as_posix().startswith(TRAINED_RUN_UNKEYED)]


def trained_run_key() -> str:
    """The shared trained run's cache key: the code training runs, the settings, Keras and TF."""
    import keras
    import tensorflow as tf

    key = hashlib.sha256(json.dumps([TRAINED_RUN, keras.__version__, tf.__version__]).encode())
    for path in trained_run_code():
        key.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return key.hexdigest()[:16]


_TRAIN_SHARED_RUN = """
import json, sys
from tfformer import run
from tfformer.train.settings import TrainSettings
spec = json.loads(sys.argv[2])
run.train(sys.argv[1], "tiny", TrainSettings(**spec["settings"]), spec["config"])
print(json.dumps(sorted(m.__file__ for name, m in sys.modules.items()
                        if name.split(".")[0] == "tfformer" and getattr(m, "__file__", None))))
"""


def train_shared_run(directory: pathlib.Path) -> None:
    """Trains the shared run as tfformer-train does (`run.train`), in a process of its own, and
    fails if it imported a module that `trained_run_key` leaves out."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", _TRAIN_SHARED_RUN, str(directory),
                             json.dumps(TRAINED_RUN)], capture_output=True, text=True,
                            timeout=900, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-5000:]
    keyed = {path.resolve() for path in trained_run_code()}
    unkeyed = [file for file in json.loads(result.stdout.strip().splitlines()[-1])
               if pathlib.Path(file).resolve() not in keyed]
    assert not unkeyed, (f"training imported {unkeyed}, which the shared run's cache key "
                         "leaves out (tests/conftest.py: TRAINED_RUN_UNKEYED)")


@pytest.fixture(scope="session")
def trained_run_dir() -> pathlib.Path:
    """A run directory of a small model that `run.train` trained 400 steps on the built-in
    corpus: its greedy and beam outputs differ from sentence to sentence and end with
    EOS of their own accord, which a random model's do not. Trained once per content of the
    code training runs (`trained_run_code`) and TRAINED_RUN, and kept in
    ~/.cache/tfformer/trained-runs/KEY for every later session and clone; xdist workers wait on
    a lock for the first one to train it. Tests read it and must not write into it."""
    cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache"))
    runs = cache / "tfformer" / "trained-runs"
    runs.mkdir(parents=True, exist_ok=True)
    directory = runs / trained_run_key()
    with open(runs / f"{directory.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (directory / "model.keras").exists():
            partial = runs / f"{directory.name}.partial-{os.getpid()}"
            train_shared_run(partial)
            partial.rename(directory)
    return directory


@pytest.fixture(scope="module")
def search_model():
    """A random model whose EOS is likelier, so that hypotheses end at different lengths,
    before the limit (tests of the searches)."""
    import keras

    from tfformer import Transformer, TransformerConfig
    from tfformer.special_tokens import EOS_ID

    keras.utils.set_random_seed(7)
    config = TransformerConfig(vocab_size=30, d_model=32, num_heads=4, d_ff=64,
                               num_encoder_layers=2, num_decoder_layers=2, dropout=0.0)
    model = Transformer(config)
    model.build()
    weights = keras.ops.convert_to_numpy(model.embedding.embeddings)
    weights[EOS_ID] *= 3.0
    model.embedding.embeddings.assign(weights)
    return model


@pytest.fixture(scope="module")
def search_sources():
    """Four EOS-terminated, PAD-padded sources of lengths 8, 3, 6 and 5 (ids < 30)."""
    import numpy as np

    from tfformer.special_tokens import EOS_ID, PAD_ID

    ids = np.random.default_rng(3).integers(4, 30, size=(4, 8)).astype("int32")
    for row, length in enumerate([8, 3, 6, 5]):
        ids[row, length - 1] = EOS_ID
        ids[row, length:] = PAD_ID
    return ids


def pytest_collection_modifyitems(config, items):
    """Under `make test`'s `pytest -n N --dist worksteal`, each worker starts with one contiguous
    share of the list (N // workers tests, the last share the rest) and an idle worker steals
    from the end of a busy one's. So each share here begins with slow end-to-end tests, dealt
    in turn a module at a time (a module's fixtures, such as the CTranslate2 tests' trained
    run, then stay on one worker), and goes on with the next stretch of the fast tests in file
    order: the slow tests start at once on every worker instead of leaving one alone with them
    at the end. Without xdist: the slow tests first."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    modules: dict[str, list] = {}
    for item in items:
        if item.get_closest_marker("slow"):
            modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    dealt: list[list] = [[] for _ in range(workers)]
    for index, module in enumerate(modules.values()):
        dealt[index % workers] += module
    fast = [item for item in items if not item.get_closest_marker("slow")]
    ordered: list = []
    for share in range(workers):
        size = len(items) // workers if share < workers - 1 else len(items) - len(ordered)
        taken = max(0, size - len(dealt[share]))
        ordered += dealt[share] + fast[:taken]
        fast = fast[taken:]
    items[:] = ordered + fast


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    """The test modules' imports (TensorFlow, Keras, JAX) stay for the whole session: Python's
    cyclic garbage collector is off while they import, and their objects are then frozen out of
    its reach, as the console scripts do with TensorFlow's
    (`tfformer.cli.console.import_tensorflow`)."""
    gc.disable()
    try:
        return (yield)
    finally:
        gc.freeze()
        gc.enable()


# CPU seconds per test (`--cpu-durations N`): this process's and its waited-for subprocesses'
# user + system time over each phase, the tests' true cost on a CPU-bound machine where wall
# time (`--durations`) also counts waiting on other workers. A subprocess is charged to the
# phase that reaps it (a module's server to the teardown that stops it). The summary also gives
# each worker's span, from its first test's start to its last one's end: when the spans end
# together and the CPU seconds fill the machine, only less work makes the suite faster.
def pytest_addoption(parser):
    parser.addoption("--cpu-durations", type=int, default=None, metavar="N",
                     help="show the N tests that used the most CPU seconds (0: all)")


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


_PHASE_CPU = pytest.StashKey[dict]()
_SESSION_START = pytest.StashKey[float]()


def _timed(item, phase: str):
    started, wall = _cpu_seconds(), time.time()
    yield
    item.stash.setdefault(_PHASE_CPU, {})[phase] = (_cpu_seconds() - started, wall, time.time())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield from _timed(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _timed(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    yield from _timed(item, "teardown")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    timed = item.stash.get(_PHASE_CPU, {}).get(call.when)
    if timed is not None:
        seconds, started, ended = timed
        outcome.get_result().user_properties += [
            ("cpu_seconds", round(seconds, 3)), ("wall_span", (started, ended)),
            ("worker", os.environ.get("PYTEST_XDIST_WORKER", "main"))]


def pytest_sessionstart(session):
    session.config.stash[_SESSION_START] = time.time()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    shown = config.getoption("--cpu-durations")
    if shown is None:
        return
    per_test: dict[str, float] = {}
    phases: dict[str, list[dict]] = {}  # worker -> the properties of each timed phase it ran
    for reports in terminalreporter.stats.values():
        for report in reports:
            properties = dict(getattr(report, "user_properties", ()))
            if "cpu_seconds" in properties:
                per_test[report.nodeid] = per_test.get(report.nodeid, 0.0) + \
                    properties["cpu_seconds"]
                phases.setdefault(properties["worker"], []).append(
                    {**properties, "nodeid": report.nodeid})
    ranked = sorted(per_test.items(), key=lambda pair: -pair[1])
    total = sum(per_test.values())
    terminalreporter.write_sep("=", f"most CPU seconds (tests and their subprocesses; "
                                    f"{total:.0f} s in all)")
    for nodeid, seconds in ranked[:shown or None]:
        terminalreporter.write_line(f"{seconds:8.1f} s  {nodeid}")
    began = config.stash[_SESSION_START]
    for worker, timed in sorted(phases.items()):
        started = min(phase["wall_span"][0] for phase in timed) - began
        ended = max(phase["wall_span"][1] for phase in timed) - began
        terminalreporter.write_line(
            f"{worker}: {len({phase['nodeid'] for phase in timed})} tests from {started:.0f} s to "
            f"{ended:.0f} s after the session began, "
            f"{sum(phase['cpu_seconds'] for phase in timed):.0f} CPU seconds")
