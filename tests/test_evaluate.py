"""tfformer-evaluate: scores against sacreBLEU's fixed points, input order, a run dir and its
SavedModel scoring alike, bad test files named."""

import json
import os

import pytest

from tfformer.cli.evaluate import main as evaluate_main
from tfformer.data.builtin import builtin_pairs
from tfformer.data.sources import DataError
from tfformer.decode.translator import load_translator
from tfformer.evaluate import read_test_set, score, translate_in_length_order
from tfformer.export.saved_model import export_saved_model

REFERENCES = ["The three red dogs eat green apples.", "A sister visits the blue bridge.",
              "There are two elephants under our lamp."]


def test_a_perfect_hypothesis_scores_100_and_an_empty_one_0():
    perfect = score(REFERENCES, REFERENCES)
    assert perfect.bleu == pytest.approx(100) and perfect.chrf == pytest.approx(100)
    assert perfect.bleu_signature.startswith("nrefs:1|") and "tok:13a" in perfect.bleu_signature
    empty = score([""] * 3, REFERENCES)
    assert empty.bleu == 0 and empty.chrf == 0
    partly = score(["The three red dogs eat apples.", "", ""], REFERENCES)
    assert 0 < partly.bleu < 100
    with pytest.raises(ValueError, match="2 hypotheses for 3 references"):
        score(REFERENCES[:2], REFERENCES)


def test_length_ordered_batches_come_back_in_input_order():
    sources = ["a b c d e", "a", "a b c", "", "a b", "a b c d e f g"]
    batches = []

    def translate(batch):
        batches.append(list(batch))
        return [s.upper() for s in batch]

    done = []
    got = translate_in_length_order(translate, sources, batch_size=4, progress=done.append)
    assert got == [s.upper() for s in sources]
    assert batches == [["", "a", "a b", "a b c"], ["a b c d e", "a b c d e f g"]]
    assert done == [4, 6]


def test_a_malformed_test_line_is_named(tmp_path):
    bad = tmp_path / "test.tsv"
    bad.write_text("hola\thello\nsin tabulador\n")
    with pytest.raises(DataError, match="test.tsv:2"):
        read_test_set(str(bad))
    (tmp_path / "src.txt").write_text("uno\ndos\n")
    (tmp_path / "ref.txt").write_text("one\n")
    with pytest.raises(DataError, match="ref.txt: 1 lines, but .*src.txt has 2"):
        read_test_set(None, str(tmp_path / "src.txt"), str(tmp_path / "ref.txt"))
    assert evaluate_main(["nowhere", "--data", str(bad)]) == 2


def test_the_test_set_takes_the_train_spec_form_too(tmp_path):
    path = tmp_path / "test.tsv"
    path.write_text("hola\thello\nadiós\tbye\n")
    assert read_test_set(f"tsv:{path}")[:2] == read_test_set(str(path))[:2] \
        == (["hola", "adiós"], ["hello", "bye"])
    with pytest.raises(ValueError, match="a test set is one file: tsv:FILE"):
        read_test_set(f"tsv:{path},{path}")
    assert evaluate_main(["nowhere", "--data", f"tsv:{path},{path}"]) == 2


@pytest.fixture(scope="module")
def run_and_export(tmp_path_factory, trained_run_dir):
    """The shared trained run (tests/conftest.py), exported with beam 2, and a dev test set."""
    run = trained_run_dir
    models = tmp_path_factory.mktemp("models")
    export_saved_model(load_translator(run, beam_size=2, max_output_extra=6), models,
                       "tfformer", 1)
    test = tmp_path_factory.mktemp("test") / "test.tsv"
    test.write_text("".join(f"{s}\t{t}\n" for s, t in builtin_pairs("dev", n=12)))
    return run, models / "tfformer", test


def test_a_run_dir_and_its_saved_model_score_alike_and_keep_order(run_and_export, tmp_path,
                                                                  capsys):
    run, saved_model, test = run_and_export
    assert evaluate_main([str(run), "--data", str(test), "--beam-size", "2",
                          "--max-output-extra", "6", "--batch-size", "5",
                          "--out", str(tmp_path / "run")]) == 0
    assert evaluate_main([str(saved_model), "--data", str(test), "--batch-size", "3",
                          "--out", str(tmp_path / "export")]) == 0
    reports = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert reports[0]["bleu"] == reports[1]["bleu"] and reports[0]["chrf"] == reports[1]["chrf"]
    assert reports[0]["search"]["beam_size"] == 2 and reports[1]["kind"] == "saved_model"
    from_run = (tmp_path / "run" / "hypotheses.txt").read_text().splitlines()
    assert from_run == (tmp_path / "export" / "hypotheses.txt").read_text().splitlines()
    # In input order: each line is what translating its source alone gives.
    translator = load_translator(run, beam_size=2, max_output_extra=6)
    sources = [line.split("\t")[0] for line in test.read_text().splitlines()]
    assert len(from_run) == len(sources) == 12
    for index in (0, 5, 11):
        assert from_run[index] == translator.translate_texts([sources[index]])[0][0]
    saved = json.loads((tmp_path / "run" / "report.json").read_text())
    assert saved["bleu"] == reports[0]["bleu"] and saved["sentences"] == 12
    assert os.path.basename(saved["test_set"]) == "test.tsv"


def test_saved_model_refuses_search_flags(run_and_export):
    _, saved_model, test = run_and_export
    assert evaluate_main([str(saved_model), "--data", str(test), "--beam-size", "4"]) == 2


def score_lines(text):
    """tfformer-score's lines as (score, [token scores])."""
    rows = [line.split("\t") for line in text.splitlines()]
    return [(float(row[0]), [float(v) for v in row[1].split()] if len(row) > 1 else None)
            for row in rows]


def test_score_program_scores_each_pair_in_order_with_a_run_or_its_saved_model(
        run_and_export, tmp_path, capsys):
    from tfformer.cli.score import main as score_main

    run, saved_model, test = run_and_export
    pairs = [line.split("\t") for line in test.read_text().splitlines()]
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    expected = load_translator(run).score_texts(sources, targets)
    assert score_main([str(run), "--data", str(test), "--batch-size", "5",
                       "--token-scores"]) == 0
    out, err = capsys.readouterr()
    from_run = score_lines(out)
    assert "12/12 pairs" in err  # the progress line, batch by batch
    assert len(from_run) == 12
    for (got, tokens), (want, _, want_tokens) in zip(from_run, expected):
        assert got == pytest.approx(want, abs=1e-5)
        assert tokens == pytest.approx(want_tokens, abs=1e-5)
    (tmp_path / "src.txt").write_text("".join(s + "\n" for s in sources))
    (tmp_path / "tgt.txt").write_text("".join(t + "\n" for t in targets))
    assert score_main([str(saved_model), "--src", str(tmp_path / "src.txt"), "--tgt",
                       str(tmp_path / "tgt.txt"), "--normalize", "--batch-size", "3",
                       "--output", str(tmp_path / "scores.txt")]) == 0
    normalized = score_lines((tmp_path / "scores.txt").read_text())
    assert [got for got, _ in normalized] == pytest.approx(
        [want for _, want, _ in expected], abs=1e-5)
    assert len({round(got, 3) for got, _ in normalized}) > 6  # pairs differ


@pytest.fixture(scope="module")
def learned_run_and_export(tmp_path_factory, trained_run_dir):
    """The shared run's tokenizer with a random model of learned positions (max_length 64),
    which bound the targets `score` takes, as a run directory and exported."""
    import dataclasses
    import shutil

    import keras

    from tfformer import Transformer

    run = tmp_path_factory.mktemp("learned")
    shutil.copy(trained_run_dir / "tokenizer.model", run)
    trained = keras.models.load_model(trained_run_dir / "model.keras", compile=False)
    model = Transformer(dataclasses.replace(trained.transformer_config, positional="learned",
                                            max_length=64))
    model.build()
    model.save(run / "model.keras")
    models = tmp_path_factory.mktemp("learned-models")
    export_saved_model(load_translator(run, beam_size=1, max_output_extra=2), models,
                       "tfformer", 1)
    return run, models / "tfformer"


def test_score_program_names_bad_input_and_exits_2(run_and_export, learned_run_and_export,
                                                   tmp_path, caplog, capsys):
    from tfformer.cli.score import main as score_main

    run, saved_model, _ = run_and_export
    learned_run, learned_saved_model = learned_run_and_export
    bad = tmp_path / "bad.tsv"
    bad.write_text("hola\thello\nsin tabulador\n")
    too_long = tmp_path / "long.tsv"
    too_long.write_text("hola\t" + "a " * 80 + "\n")
    (tmp_path / "one.txt").write_text("uno\n")
    for model, args, named in (
            (run, ["--data", str(bad)], "bad.tsv:2"),
            (run, ["--src", str(bad), "--tgt", str(tmp_path / "one.txt")],
             "one.txt: 1 lines, but"),
            (learned_run, ["--data", str(too_long)],
             "score: targets must each be at most 63 pieces long"),
            (learned_saved_model, ["--data", str(too_long)],
             "score: targets must each be at most 63 pieces long")):
        caplog.clear()
        assert score_main([str(model), *args]) == 2, named
        assert named in caplog.text, caplog.text
        assert "Traceback" not in caplog.text
    # Sinusoids take it: the search's outputs may be as long.
    assert score_main([str(saved_model), "--data", str(too_long)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
