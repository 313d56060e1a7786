"""The notebooks: stored without outputs, and run top to bottom with small settings (what a
Colab user runs, with TFFORMER_NOTEBOOK_SMALL=1), producing the figures they promise."""

import base64
import io
import os
import re

import numpy as np
import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         "notebooks")
NAMES = ["quickstart.ipynb", "paper_and_code.ipynb", "opus_mt.ipynb"]
IMAGE_TAG = "expect-image"  # cells that must display a figure


def read(name):
    return nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)


def text_of(cell) -> str:
    return "".join(output.get("text", "") + output.get("data", {}).get("text/plain", "")
                   for output in cell.outputs)


def png_images(cell) -> list[np.ndarray]:
    from matplotlib.image import imread

    return [imread(io.BytesIO(base64.b64decode(output["data"]["image/png"])))
            for output in cell.outputs if "image/png" in output.get("data", {})]


def test_notebooks_are_stored_clean_valid_and_open_in_colab():
    assert sorted(n for n in os.listdir(NOTEBOOKS) if n.endswith(".ipynb")) == sorted(NAMES)
    for name in NAMES:
        notebook = read(name)
        nbformat.validate(notebook)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, (
                    f"{name}: a cell is stored with outputs: {cell.source[:60]!r}")
        assert (f"colab.research.google.com/github/tfformer/tfformer/blob/main/notebooks/{name}"
                in notebook.cells[0].source)
        assert any(IMAGE_TAG in cell.metadata.get("tags", []) for cell in notebook.cells)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_top_to_bottom_and_draws_its_figures(name, tmp_path, monkeypatch):
    monkeypatch.setenv("TFFORMER_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("TFFORMER_NOTEBOOK_DIR", str(tmp_path))
    notebook = read(name)
    # Any cell error raises CellExecutionError with the cell and its traceback.
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": NOTEBOOKS}}).execute()
    tagged = [cell for cell in notebook.cells if IMAGE_TAG in cell.metadata.get("tags", [])]
    for cell in tagged:
        images = png_images(cell)
        assert images, f"no figure from: {cell.source[:80]!r}"
        for image in images:
            height, width = image.shape[:2]
            assert height >= 150 and width >= 200
            drawn = np.mean(np.any(image[..., :3] < 0.85, axis=-1))
            assert drawn > 0.02, f"{drawn:.1%} of the figure is drawn: {cell.source[:80]!r}"
    output = "\n".join(text_of(cell) for cell in notebook.cells if cell.cell_type == "code")
    if name == "quickstart.ipynb":
        assert len(tagged) == 4  # history, one head, the layer x head grid, the schedule
        run_dir = tmp_path / "tiny-builtin"
        for produced in ("model.keras", "history.png", "model-avg3.keras"):
            assert (run_dir / produced).exists(), produced
        assert (tmp_path / "models" / "tfformer" / "1" / "saved_model.pb").exists()
        assert "6 updates; last epoch" in output
        # The SavedModel in process and the gRPC call each print one score and text per example.
        for marker in ("saved_model.signatures", "client.translate"):
            [cell] = [c for c in notebook.cells if marker in c.source]
            printed = "".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stdout")
            scores = [line.split()[0] for line in printed.splitlines()
                      if line.strip() and not line.startswith("exported")]
            assert len(scores) == 2 and all(float(s) < 0 for s in scores), printed
        assert "policy: mixed_bfloat16 | logits: float32" in output
    elif name == "opus_mt.ipynb":
        assert len(tagged) == 1  # the imported model's cross-attention
        run_dir = tmp_path / "runs" / "opus-es-en"
        for produced in ("model.keras", "vocabulary.json", "pretrained.json"):
            assert (run_dir / produced).exists(), produced
        assert "swish" in output and "layers" in output
        [cell] = [c for c in notebook.cells if "saved_model.signatures" in c.source]
        printed = "".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stdout")
        scores = [line.split()[0] for line in printed.splitlines() if line.strip()]
        assert len(scores) == 2 and all(float(s) < 0 for s in scores), printed
        # The export translates as the in-memory Translator, the same text per example.
        [translated] = [c for c in notebook.cells
                        if "translator.translate_texts(EXAMPLES)" in c.source]
        texts = [line.split("  -> ")[1].rsplit("  (", 1)[0] for line in text_of(
            translated).splitlines() if "  -> " in line]
        assert [line.split(None, 1)[1] if len(line.split(None, 1)) > 1 else ""
                for line in printed.splitlines() if line.strip()] == texts
        # model.fit fine-tunes the imported model: its loss on held-out pairs falls.
        before, after = map(float, re.search(
            r"dev loss: ([\d.]+) before fine-tuning, ([\d.]+) after", output).groups())
        assert after < before, (before, after)
        assert (tmp_path / "opus-es-en-mine.keras").exists()
    else:
        assert len(tagged) == 2  # positional encodings, the schedule
        assert "(paper 65M)" in output and "(paper 213M)" in output
        assert "no weight on the future or on padding" in output
