"""The package's shape: one import name, data flowing one way, a library that never prints."""

import ast
import os
import subprocess
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "tfformer")
# What a program may use but training code may not: the export and everything serving.
SERVING_SIDE = ("tfformer.export", "tfformer.serving", "tfformer.run", "tfformer.cli",
                "tfformer.evaluate", "tfformer.ctranslate2_export")


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
    assert "tfformer/serving_ops.txt" in names
    for script in ("train", "average", "export", "evaluate", "serve", "translate"):
        assert f"tfformer-{script} = tfformer.cli.{script}:main" in entry_points.decode()


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
