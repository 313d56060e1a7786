"""The data's way, one stage a module, each using only the ones above it:

* `records`: pairs as `tf.data` records, the line rules that check them in the graph,
  `DataError` (file and line);
* `tsv_lines` (no TensorFlow): the line rules in Python, a TSV file read into memory (dev and
  test sets) and checked whole;
* `tsv`, `tfds`: the streaming readers of TSV files (and `read_tsv`, a `ParallelText`) and of
  TensorFlow Datasets;
* `builtin`: the synthetic Spanish→English corpus (`vocabulary` tables, `grammar`);
* `sources`: data specs and the `Corpus` each names;
* `scan`: the one ordered pass over the training side (counts, held-out dev, vocabulary sample);
* `buckets` (no TensorFlow): the grid of batch shapes and the rows per bucket;
* `packing`: several pairs per row of a fixed length, with segment ids (one batch shape);
* `tokenizer`: SentencePiece, trained here and run in the graph;
* `batching`: tokenized in the graph, the token budget, the length-bucketed (or packed)
  `tf.data` batches.

Import the stage you use (`from tfformer.data.batching import make_dataset`): this package
itself imports nothing, so that `tfformer.data.buckets` and `tfformer.data.builtin` serve
where TensorFlow is not installed.
"""
