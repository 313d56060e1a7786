#!/usr/bin/env bash
# Downloads into .whl/ (repository root, git-ignored) the wheels that the GPU machine lacks for
# benchmarks/training/train_gpu.py: Keras and the Keras requirements that machine does not have.
#
# The GPU machine has CPython 3.12, jax (CUDA), flax, optax, torch, numpy, h5py, absl-py, rich,
# ml-dtypes, sentencepiece and sacrebleu, no TensorFlow, no Keras and no network; at most 64 MiB
# of files travel with a run. keras 3.15.1 requires absl-py, numpy, rich, namex, h5py, optree,
# ml-dtypes and packaging (its METADATA's Requires-Dist); the missing ones are namex, optree and
# packaging (optree's own requirement, typing-extensions >= 4.10, comes with torch).
#
# Here (with network), from the repository root:
#     bash benchmarks/training/gpu_wheels.sh
# On the GPU machine (the run's working directory is the repository root, .whl/ carried):
#     python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#         --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD && \
#         python3 benchmarks/training/train_gpu.py --preset big --out $OUT/train_gpu.json
#
# Pure-Python wheels (py3-none-any) are accepted under the manylinux --platform tags: no
# `--platform any` is needed. Versions are pinned to those of the development virtualenv.
set -euo pipefail

cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
DEST=.whl
WHEELS=(keras==3.15.1 optree==0.20.0 namex==0.1.0 packaging==26.3)
# What the GPU machine has already (normalised distribution names).
PRESENT=" absl-py numpy rich h5py ml-dtypes "

mkdir -p "$DEST"
for wheel in "${WHEELS[@]}"; do
    "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux1_x86_64 -d "$DEST" "$wheel"
done

# Every unconditional requirement of Keras must be downloaded or already on the GPU machine.
missing=0
for requirement in $(unzip -p "$DEST"/keras-3.15.1-*.whl '*/METADATA' \
        | sed -n 's/^Requires-Dist: *\([A-Za-z0-9_.-]*\)[^;]*$/\1/p'); do
    name=$(echo "$requirement" | tr 'A-Z_.' 'a-z--')
    if [[ "$PRESENT" != *" $name "* ]] && ! ls "$DEST" | tr 'A-Z_' 'a-z-' | grep -q "^$name-"; then
        echo "keras requires $requirement: neither downloaded nor on the GPU machine" >&2
        missing=1
    fi
done

ls -l "$DEST"
bytes=$(du -cb "$DEST"/*.whl | tail -1 | cut -f1)
echo "total: $bytes bytes in $DEST"
if (( bytes > 48 * 1024 * 1024 )); then
    echo "the wheels take more than 48 MiB of the 64 MiB a run may carry" >&2
    exit 1
fi
exit $missing
