"""A training run, resumable and kill-safe: its settings (`settings`), its named steps
(`steps`, what `tfformer.run.train` calls), its data (`inputs`: the scan, the vocabulary, the dev
set, the batches), where it trains (`devices`), its precision choice, the fit loop (`fit`), the
backup protocol (`state`), the weight files (`checkpoints`), every Keras callback
(`callbacks/`), compilation counts and plots. Import the module you use.
"""
