"""Whole documents (tfformer.decode.documents and the translate_document signature): the
sentence rule, the document's own spacing kept, each sentence translated as it is alone, and a
sentence over the model's limit translated in parts instead of refused."""

import numpy as np
import pytest
import tensorflow as tf

from tfformer.decode.documents import chunk_rows, split_documents
from tfformer.decode.translator import Translator, load_translator

pytestmark = pytest.mark.slow  # the translator tests build and trace models


def parts(document):
    return [part.decode("utf-8") for part in split_documents(tf.constant([document]))[0].numpy()]


@pytest.mark.parametrize("document, expected", [
    ("Hola. ¿Qué tal? ¡Bien!  Adiós", ["Hola.", " ", "¿Qué tal?", " ", "¡Bien!", "  ", "Adiós"]),
    # Abbreviations and initials end no sentence; a number's point is no boundary either.
    ("El Sr. García y la Dra. Pérez leen a J. R. R. Tolkien. Cuesta 3.5 euros, etc. y más.",
     ["El Sr. García y la Dra. Pérez leen a J. R. R. Tolkien.", " ",
      "Cuesta 3.5 euros, etc. y más."]),
    # Closing quotes and brackets stay with their sentence; every line break is a boundary.
    ('Dijo "no." (Y se fue.) Luego\nvolvió\n\n  Fin.\n',
     ['Dijo "no."', " ", "(Y se fue.)", " ", "Luego", "\n", "volvió", "\n\n  ", "Fin.", "\n",
      ""]),
    ("  Whitespace around.  ", ["", "  ", "Whitespace around.", "  ", ""]),
    ("", [""]),
    ("no punctuation at all", ["no punctuation at all"]),
    ("tabs.\tare spaces\x1ftoo.", ["tabs.", "\t", "are spaces too."]),  # our marks: spaces
])
def test_the_sentence_rule_and_every_separator_kept(document, expected):
    assert parts(document) == expected
    if "\x1f" not in document:
        assert "".join(parts(document)) == document  # the document comes back whole


def test_rows_are_cut_into_chunks_of_the_limit():
    chunks, counts = chunk_rows(tf.ragged.constant([[1, 2, 3, 4, 5], [], [6, 7]]), 2)
    assert chunks.to_list() == [[1, 2], [3, 4], [5], [], [6, 7]]
    assert counts.numpy().tolist() == [3, 1, 1]


@pytest.fixture(scope="module")
def translator(trained_run_dir):
    """The shared trained run (beam 2): translations that end of their own accord."""
    return load_translator(trained_run_dir, beam_size=2)


def translate_documents(translator, documents):
    outputs = translator.translate_document(tf.constant(documents))
    return {name: value.numpy() for name, value in outputs.items()}


def test_a_document_keeps_its_structure_and_each_sentence_translates_as_alone(translator):
    sentences = ["Los tres perros rojos comen manzanas verdes.", "Una hermana visita el puente.",
                 "¿Dónde está la biblioteca?", "Hola.", "El gato duerme."]
    separators = [" ", "\n\n", "  ", "\n"]
    document = "  " + "".join(s + sep for s, sep in zip(sentences, separators + [""])) + "\n"
    alone = translator.translate_texts(sentences)
    got = translate_documents(translator, [document, "", "Hola."])
    expected = "  " + "".join(text + sep for (text, _), sep in
                              zip(alone, separators + [""])) + "\n"
    assert got["translations"][0].decode("utf-8") == expected
    assert got["translations"][1].decode("utf-8") == ""
    assert got["translations"][2].decode("utf-8") == alone[3][0]
    assert got["sentences"].tolist() == [7, 1, 1]  # the empty ones before and after count
    assert got["splits"].shape == got["scores"].shape == (3, 7)
    assert got["splits"][0].tolist() == [0, 1, 1, 1, 1, 1, 0]
    np.testing.assert_allclose(got["scores"][0, 1:6], [score for _, score in alone], atol=1e-5)
    assert got["splits"][1:].tolist() == [[0] * 7, [1] + [0] * 6]
    assert len({text for text, _ in alone}) > 3  # the sentences translate differently


def test_a_sentence_over_the_limit_is_translated_in_parts(make_run_dir):
    """A model of learned positions (max_length 12) refuses a longer sentence in
    `translate`; `translate_document` translates it in parts of at most 11 pieces, each as the
    search translates those pieces, joined by a space, and says in how many."""
    run = make_run_dir(seed=3, pairs=500, vocab_size=200, d_model=16, num_heads=2, d_ff=32,
                       num_encoder_layers=1, num_decoder_layers=1, max_length=12,
                       positional="learned")
    translator = load_translator(run, beam_size=1, max_output_extra=4)
    assert isinstance(translator, Translator)
    long = "los tres perros rojos comen manzanas verdes debajo de la mesa azul del jardín"
    pieces = translator.tokenizer.pieces.encode([long])[0]
    assert len(pieces) > 22  # three parts
    with pytest.raises(tf.errors.InvalidArgumentError):
        translator.translate_texts([long])
    got = translate_documents(translator, [f"Hola. {long}"])
    parts_count = -(-len(pieces) // 11)
    assert got["splits"].tolist() == [[1, parts_count]]
    chunks = [pieces[i:i + 11] + [3] for i in range(0, len(pieces), 11)]
    width = max(map(len, chunks))
    ids = tf.constant([chunk + [0] * (width - len(chunk)) for chunk in chunks])
    result = translator.search(ids)
    texts = [t.decode("utf-8") for t in
             translator.tokenizer.detokenize(result.tokens[:, 0]).numpy()]
    hello = translator.translate_texts(["Hola."])[0][0]
    assert got["translations"][0].decode("utf-8") == f"{hello} " + " ".join(texts)
    np.testing.assert_allclose(got["scores"][0, 1], result.scores.numpy()[:, 0].sum(),
                               atol=1e-5)


def test_translate_program_translates_a_file_of_documents(make_run_dir, tmp_path, capsys):
    """tfformer-translate --document --input FILE --output FILE: a line per document, in
    order, the export's translate_document; a sentence over the limit is named on stderr."""
    from tfformer.cli.translate import main as translate_main
    from tfformer.export.saved_model import export_saved_model

    run = make_run_dir(seed=4, pairs=500, vocab_size=200, d_model=16, num_heads=2, d_ff=32,
                       num_encoder_layers=1, num_decoder_layers=1, max_length=12,
                       positional="learned")
    translator = load_translator(run, beam_size=1, max_output_extra=4)
    export_saved_model(translator, tmp_path / "models", "tfformer", 1)
    long = "los tres perros rojos comen manzanas verdes debajo de la mesa azul"
    lines = ["Hola. Adiós.", "", "  Una hermana.  ¿Dónde?", f"Sí. {long}", "El gato."]
    (tmp_path / "in.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    assert translate_main(["--saved-model", str(tmp_path / "models" / "tfformer"),
                           "--document", "--input", str(tmp_path / "in.txt"),
                           "--output", str(tmp_path / "out.txt"), "--batch-size", "2"]) == 0
    err = capsys.readouterr().err
    expected = translate_documents(translator, lines)
    got = (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n")
    assert got == [t.decode("utf-8") for t in expected["translations"]] + [""]
    parts_count = int(expected["splits"][3, 1])
    assert parts_count > 1
    assert f"line 4: sentence 2 is longer than the model takes: translated in {parts_count} " \
           "parts" in err
    assert "5/5 lines" in err  # the progress line
    assert translate_main(["--saved-model", str(tmp_path / "models"), "--document", "--input",
                           str(tmp_path / "missing.txt")]) == 2
    with pytest.raises(SystemExit) as both:
        translate_main(["--document", "--input", str(tmp_path / "in.txt"), "hola"])
    assert both.value.code == 2
    assert "give SENTENCE arguments or --input FILE, not both" in capsys.readouterr().err
