"""What every layer of the package uses, without Keras or TensorFlow at import: atomic writes
(`files`), argument checks that name the argument (`checks`), the run directory's file names
(`run_dir`), the Keras backend and the one check of which backend runs (`backends`), the CPU's
flags (`cpu`), and what `import tfformer` sets up (`imports`).
"""
