"""Writes tfformer/export/serving_ops.txt: the ops a stock TensorFlow Serving binary runs.

TF Serving links core TensorFlow plus the ops of tensorflow-text 2.20.0. Run this with
tensorflow==2.20.0 and tensorflow-text==2.20.0 installed (the second virtualenv that CI makes):

    python tools/make_op_allowlist.py tfformer/export/serving_ops.txt          # write
    python tools/make_op_allowlist.py --check tfformer/export/serving_ops.txt  # exit 1 if stale

Left out, to be safe:
- XLA ops (Xla*): registered in the TensorFlow pip package, but without kernels outside XLA
  devices; a stock TF Serving binary does not run them (keras.ops.slice_update lowers to
  XlaDynamicUpdateSlice).
- tf-text's "TFText>*" ops (TFLite-shim kernels such as TFText>RoundRobinTrim): the Python
  package registers them, but they are not among the tf-text kernels TF Serving is known to link.
  tfformer needs only the Sentencepiece* ops.
"""

import argparse
import sys


def registered_ops() -> set[str]:
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session as c_api

    op_list = op_def_pb2.OpList()
    op_list.ParseFromString(c_api.TF_GetBuffer(c_api.TF_GetAllOpList()))
    return {op.name for op in op_list.op}


def serving_ops() -> tuple[str, str, set[str]]:
    import tensorflow as tf

    core = registered_ops()
    import tensorflow_text

    text_ops = registered_ops() - core
    left_out = lambda op: op.lstrip("_").startswith("Xla") or op.startswith("TFText>")  # noqa: E731
    return (tf.__version__, tensorflow_text.__version__,
            {op for op in core | text_ops if not left_out(op)})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    tf_version, text_version, ops = serving_ops()
    header = (f"# Ops of stock TF Serving: tensorflow {tf_version} core (no Xla* ops) + "
              f"tensorflow-text {text_version} (no TFText>* ops).\n"
              f"# Made by tools/make_op_allowlist.py; one op per line.\n")
    content = header + "".join(f"{op}\n" for op in sorted(ops))
    if args.check:
        with open(args.path) as f:
            listed = {line.strip() for line in f if line.strip() and not line.startswith("#")}
        if listed != ops:
            print(f"{args.path} is stale: {len(ops - listed)} op(s) missing, "
                  f"{len(listed - ops)} extra", file=sys.stderr)
            return 1
        print(f"{args.path} matches tensorflow {tf_version} + tensorflow-text {text_version}: "
              f"{len(ops)} ops")
        return 0
    with open(args.path, "w") as f:
        f.write(content)
    print(f"wrote {len(ops)} ops to {args.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
