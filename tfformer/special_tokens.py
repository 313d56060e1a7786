"""Reserved token ids, shared by the tokenizer, the data pipeline, the model and search.

This is the single source of truth: SentencePiece is trained with exactly these ids, so the ids
that training sees are the ids that the exported SavedModel produces and consumes.
"""

PAD_ID = 0  # masked everywhere: attention keys, loss, metrics
UNK_ID = 1
BOS_ID = 2  # starts every decoder input
EOS_ID = 3  # ends every target; search stops a hypothesis on it

PAD_PIECE = "<pad>"
UNK_PIECE = "<unk>"
BOS_PIECE = "<s>"
EOS_PIECE = "</s>"

NUM_RESERVED = 4
