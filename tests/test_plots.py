"""tfformer.decode.attention_maps and tfformer.train.plots: the weights behind a heatmap, and
figures rendered with the Agg backend that are not blank and carry the sentence's pieces."""

import io
import logging

import numpy as np
import pytest
import tensorflow as tf

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

from matplotlib.image import imread  # noqa: E402

from tfformer.config import TransformerConfig  # noqa: E402
from tfformer.data.builtin import builtin_pairs  # noqa: E402
from tfformer.data.tokenizer import Tokenizer  # noqa: E402
from tfformer.decode.attention_maps import attention_maps  # noqa: E402
from tfformer.decode.translator import Translator  # noqa: E402
from tfformer.model.transformer import Transformer  # noqa: E402
from tfformer.special_tokens import BOS_ID, EOS_ID  # noqa: E402
from tfformer.train import plots  # noqa: E402
from tfformer.train.steps import save_history_plot  # noqa: E402
from tfformer.utils.run_dir import RunDir  # noqa: E402


@pytest.fixture(scope="module")
def translator():
    tf.keras.utils.set_random_seed(0)  # before the tokenizer's tf-text resource exists
    pairs = builtin_pairs("train", n=300)
    tokenizer = Tokenizer.train([s for p in pairs for s in p], 200)
    config = TransformerConfig(vocab_size=tokenizer.vocab_size, d_model=32, num_heads=4,
                               d_ff=64, num_encoder_layers=2, num_decoder_layers=3)
    return Translator(Transformer(config), tokenizer, beam_size=2, max_output_extra=5)


def pixels(fig) -> np.ndarray:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    buffer.seek(0)
    return imread(buffer)


def assert_not_blank(fig, at_least=0.01):
    """The data (lines, images) cover a visible part of the figure: rendering it again with
    them hidden changes at least `at_least` of the pixels."""
    drawn = pixels(fig)
    artists = [a for ax in fig.axes for a in ax.lines + ax.images]
    assert artists, "nothing plotted"
    for artist in artists:
        artist.set_visible(False)
    frame_only = pixels(fig)
    for artist in artists:
        artist.set_visible(True)
    changed = np.mean(np.any(np.abs(drawn - frame_only) > 0.1, axis=-1))
    assert changed >= at_least, f"the data change only {changed:.2%} of the pixels"


def tick_texts(labels):
    return [label.get_text() for label in labels]


def test_maps_of_a_given_target_hold_its_pieces_and_the_models_weights(translator):
    tokenizer = translator.tokenizer
    maps = attention_maps(translator, "Los tres perros rojos.", "The three red dogs.")
    source_ids = tokenizer.encode_source(tf.constant(["Los tres perros rojos."]))[0].numpy()
    target_ids = tokenizer.tokenize(tf.constant(["The three red dogs."]))[0].numpy()
    pieces = [tokenizer.id_to_piece(int(i)) for i in target_ids]
    assert maps.source_pieces == [tokenizer.id_to_piece(int(i)) for i in source_ids[:-1]] + [
        "</s>"]
    assert maps.target_in_pieces == ["<s>"] + pieces
    assert maps.target_out_pieces == pieces + ["</s>"]
    assert "".join(pieces).replace("\u2581", " ").strip() == "The three red dogs."
    s, t = len(source_ids), len(target_ids) + 1
    assert maps.weights["encoder_self"].shape == (2, 4, s, s)
    assert maps.weights["decoder_self"].shape == (3, 4, t, t)
    assert maps.weights["decoder_cross"].shape == (3, 4, t, s)
    expected = translator.model.attention_weights(
        source_ids[None], tf.constant([[BOS_ID] + list(target_ids)]))
    np.testing.assert_allclose(maps.weights["decoder_cross"][1],
                               expected["decoder_cross"][1][0], atol=1e-6)
    assert maps.labels("decoder_cross") == (maps.target_out_pieces, maps.source_pieces)
    with pytest.raises(ValueError, match="kind must be one of"):
        maps.labels("cross")


def test_maps_of_the_models_own_translation_follow_its_search(translator):
    source = "Mi hermana visita el puente azul."
    maps = attention_maps(translator, source)
    [(text, _)] = translator.translate_texts([source])
    assert maps.translation == text
    assert maps.target_out_pieces[-1] == "</s>" and maps.target_in_pieces[0] == "<s>"
    assert len(maps.target_out_pieces) == maps.weights["decoder_cross"].shape[2]
    # At most (source pieces + max_output_extra) tokens, EOS included (§6.1).
    assert len(maps.target_out_pieces) <= len(maps.source_pieces) + 5
    assert EOS_ID not in [BOS_ID]  # the labels name the special ids, not their pieces
    assert "</s>" not in maps.target_out_pieces[:-1]


def test_heatmap_axes_carry_the_pieces_and_the_image_is_drawn(translator):
    maps = attention_maps(translator, "El niño bebe zumo.", "The boy drinks juice.")
    fig = plots.plot_attention(maps, "decoder_cross", layer=-1, head=2)
    [ax] = [a for a in fig.axes if a.get_label() != "<colorbar>"]
    fig.canvas.draw()
    assert tick_texts(ax.get_xticklabels()) == maps.source_pieces
    assert tick_texts(ax.get_yticklabels()) == maps.target_out_pieces
    assert "layer 3, head 3" in ax.get_title()
    np.testing.assert_allclose(ax.images[0].get_array(), maps.weights["decoder_cross"][2, 2])
    assert_not_blank(fig, at_least=0.2)
    fig = plots.plot_attention(maps, "encoder_self", layer=0, head=0)
    fig.canvas.draw()
    assert tick_texts(fig.axes[0].get_yticklabels()) == maps.source_pieces
    with pytest.raises(ValueError, match="2 layers x 4 heads"):
        plots.plot_attention(maps, "encoder_self", layer=2)


def test_grid_has_one_heatmap_per_layer_and_head_with_pieces_on_the_outer_axes(translator):
    maps = attention_maps(translator, "Hay dos lámparas.", "There are two lamps.")
    fig = plots.plot_attention_grid(maps, "decoder_self")
    fig.canvas.draw()
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert len(heatmaps) == 3 * 4
    bottom_left = heatmaps[2 * 4]
    assert tick_texts(bottom_left.get_xticklabels()) == maps.target_in_pieces
    assert tick_texts(bottom_left.get_yticklabels()) == maps.target_out_pieces
    for i, ax in enumerate(heatmaps):
        np.testing.assert_allclose(ax.images[0].get_array(),
                                   maps.weights["decoder_self"][i // 4, i % 4])
    assert_not_blank(fig, at_least=0.2)


def test_schedule_plot_follows_equation_3_and_peaks_at_the_warmup():
    fig = plots.plot_schedule(512, warmup_steps=4000, steps=20000)
    [line] = fig.axes[0].get_lines()[:1]
    step, rate = line.get_xdata(), line.get_ydata()
    # lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (§5.3), in NumPy.
    np.testing.assert_allclose(rate, 512 ** -0.5 * np.minimum(step ** -0.5, step * 4000 ** -1.5),
                               rtol=1e-5)
    assert abs(step[np.argmax(rate)] - 4000) <= 20000 / 2000 + 1
    assert_not_blank(fig)


def write_metrics(run_dir, rows):
    header = "epoch,step,accuracy,loss,perplexity,val_accuracy,val_loss,val_perplexity,dev_bleu"
    lines = [header] + [",".join(str(v) for v in row) for row in rows]
    (run_dir / "metrics.csv").write_text("\n".join(lines) + "\n")


def test_history_plot_draws_loss_accuracy_and_bleu_from_the_runs_csv(tmp_path):
    write_metrics(tmp_path, [(1, 100, 0.2, 6.1, 400, 0.3, 5.0, 150, 1.5),
                             (2, 200, 0.5, 3.4, 30, 0.6, 2.9, 18, 12.0),
                             (3, 300, 0.6, 2.8, 16, 0.7, 2.5, 12, "")])
    fig = plots.plot_history(tmp_path)
    loss, accuracy, bleu = fig.axes
    assert [ax.get_title() for ax in fig.axes] == ["loss", "accuracy", "dev BLEU"]
    assert list(loss.get_lines()[0].get_xdata()) == [100, 200, 300]
    assert list(loss.get_lines()[1].get_ydata()) == [5.0, 2.9, 2.5]
    assert list(accuracy.get_lines()[0].get_ydata()) == [0.2, 0.5, 0.6]
    np.testing.assert_equal(bleu.get_lines()[0].get_ydata(), [1.5, 12.0, np.nan])
    assert_not_blank(fig)
    path = plots.save_history_plot(tmp_path)
    assert path == RunDir(tmp_path).history_plot
    assert pixels(fig).shape[:2] == imread(path).shape[:2]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_a_run_without_matplotlib_or_epochs_still_ends_without_a_plot(tmp_path, monkeypatch,
                                                                      caplog):
    caplog.set_level(logging.INFO, logger="tfformer.run")
    write_metrics(tmp_path, [])  # no finished epoch: nothing to draw, a warning, no error
    save_history_plot(RunDir(tmp_path))
    assert "could not draw" in caplog.text and "has no epochs yet" in caplog.text
    monkeypatch.setattr(plots, "available", lambda: False)
    save_history_plot(RunDir(tmp_path))
    assert "install the plot extra" in caplog.text
    assert not (tmp_path / "history.png").exists()
    with pytest.raises(ImportError, match=r"pip install 'tfformer\[plot\]'"):
        plots.plot_schedule(512)
