"""The package's shape: one import name, data flowing one way, a library that never prints."""

import ast
import os
import subprocess
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "tfformer")
# The package's layers, lowest first: a module imports only its own layer and those below it.
# model/ and data/ are peers that never import each other. config, special_tokens and contract
# are facts every layer shares; run and evaluate are the facades over every layer.
LAYERS = [
    ("tfformer.utils",),
    ("tfformer.config", "tfformer.special_tokens", "tfformer.contract"),
    ("tfformer.model",),
    ("tfformer.data",),
    ("tfformer.decode",),
    ("tfformer.train",),
    ("tfformer.pretrained",),
    ("tfformer.export",),
    ("tfformer.serving",),
    ("tfformer.run", "tfformer.evaluate"),
    ("tfformer.cli",),
]
PEERS = {("tfformer.model",), ("tfformer.data",)}
# What a program may use but training code may not: the export and everything serving.
SERVING_SIDE = ("tfformer.export", "tfformer.serving", "tfformer.run", "tfformer.cli",
                "tfformer.evaluate")

def modules():
    """(dotted name, parsed tree) of every module of the package."""
    for directory, _, names in os.walk(PACKAGE):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                dotted = dotted.removesuffix(".__init__")
                with open(path, encoding="utf-8") as f:
                    yield dotted, ast.parse(f.read(), path)


def imported(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def within(name, prefixes):
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_a_wheel_installs_one_import_name(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path), ROOT], check=True, capture_output=True,
                   timeout=300)
    [wheel] = [p for p in os.listdir(tmp_path) if p.endswith(".whl")]
    with zipfile.ZipFile(tmp_path / wheel) as archive:
        names = archive.namelist()
        [top_level] = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert archive.read(top_level).decode().split() == ["tfformer"]
        entry_points = archive.read(top_level.replace("top_level.txt", "entry_points.txt"))
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {
        "tfformer"}
    assert "tfformer/export/serving_ops.txt" in names
    for script in ("prepare", "train", "average", "export", "evaluate", "serve", "translate"):
        assert f"tfformer-{script} = tfformer.cli.{script}:main" in entry_points.decode()


def layer_of(name):
    for rank, prefixes in enumerate(LAYERS):
        if within(name, prefixes):
            return rank
    return None


def test_every_module_lives_in_a_layer_and_the_package_root_holds_a_handful():
    loose = []
    for name, _ in modules():
        if name != "tfformer":
            assert layer_of(name) is not None, f"{name} is in no layer of LAYERS"
            if name.count(".") == 1 and not os.path.isdir(os.path.join(PACKAGE,
                                                                        name.split(".")[1])):
                loose.append(name)
    assert sorted(loose) == ["tfformer.config", "tfformer.contract", "tfformer.evaluate",
                             "tfformer.run", "tfformer.special_tokens"]


def test_imports_go_down_the_layers():
    checked = 0
    for name, tree in modules():
        rank = layer_of(name)
        if rank is None:
            continue
        for target in imported(tree):
            if not within(target, ("tfformer",)) or target == "tfformer":
                continue
            target_rank = layer_of(target)
            if target_rank is None:  # `from tfformer.data import batching`: the name is a module
                continue
            assert target_rank <= rank, f"{name} (layer {LAYERS[rank]}) imports {target}"
            if target_rank == rank and LAYERS[rank] in PEERS:
                assert within(target, LAYERS[rank]), f"{name} imports {target}"
            peer = [p for p in PEERS if within(target, p)]
            if peer and LAYERS[rank] in PEERS and LAYERS[rank] != peer[0]:
                raise AssertionError(f"{name} imports its peer layer's {target}")
            checked += 1
    assert checked >= 100


def test_the_data_layer_imports_no_keras():
    for name, tree in modules():
        if within(name, ("tfformer.data",)):
            wrong = sorted(i for i in imported(tree) if within(i, ("keras",)))
            assert not wrong, f"{name} imports {wrong}"


def test_training_code_never_imports_export_or_serving_code():
    checked = 0
    for name, tree in modules():
        if within(name, SERVING_SIDE):
            continue
        checked += 1
        wrong = sorted(i for i in imported(tree) if within(i, SERVING_SIDE))
        assert not wrong, f"{name} imports {wrong}"
    assert checked >= 20


def test_the_library_never_imports_its_programs():
    for name, tree in modules():
        if not within(name, ("tfformer.cli",)):
            wrong = sorted(i for i in imported(tree) if within(i, ("tfformer.cli",)))
            assert not wrong, f"{name} imports {wrong}"


def test_the_library_never_prints_parses_argv_or_exits():
    for name, tree in modules():
        if within(name, ("tfformer.cli",)):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in ("print", "exit"), f"{name}:{node.lineno}"
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                assert (node.value.id, node.attr) not in (
                    ("sys", "argv"), ("sys", "exit"), ("argparse", "ArgumentParser")), \
                    f"{name}:{node.lineno}"
