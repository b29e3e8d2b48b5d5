#!/usr/bin/env bash
# The CUTLASS DSL's wheels for a GPU machine that has no network and takes files in loads of at
# most 64 MiB. The wheels: nvidia-cutlass-dsl (pyproject's `cute` pin) and what it requires that
# a CUDA torch install lacks (cuda-python and its parts); CPython 3.12, manylinux x86_64.
#
# Here, with network, from the repository root:
#   bash benchmarks/carry_wheels.sh download   # the wheels into .whl/ (git ignores it)
#   bash benchmarks/carry_wheels.sh split      # .whl/carry1/ and .whl/carry2/, each under LOAD_MIB
# There, after each load arrived in the checkout (carry1 in one call, carry2 in the next):
#   bash benchmarks/carry_wheels.sh stash .whl/carry1   # (then .whl/carry2) copies it to $WHEELS
#   bash benchmarks/carry_wheels.sh install             # joins, checks sha256, installs into $SITE
#   export PYTHONPATH=$SITE:$SITE/nvidia_cutlass_dsl/python_packages   # what install prints
# (`pip install --target` writes the DSL's .pth file, which puts python_packages on the path,
# but Python reads .pth files only in site folders, not in PYTHONPATH folders.)
set -euo pipefail
cd "$(dirname "$0")/.."
DSL_VERSION=4.5.2
# What nvidia-cutlass-dsl 4.5.2 requires (Requires-Dist: nvidia-cutlass-dsl-libs-base; that one:
# numpy, typing-extensions, cuda-python>=12.8), at the versions pip resolved on 2026-11-25;
# numpy and typing-extensions come with torch.
PACKAGES=("nvidia-cutlass-dsl==$DSL_VERSION" "nvidia-cutlass-dsl-libs-base==$DSL_VERSION"
          "cuda-python==13.4.4" "cuda-bindings==13.4.4" "cuda-core==1.2.2" "cuda-pathfinder==1.9.1")
LOAD_MIB=60  # each load under the 64 MiB a call carries, with room for the checkout's own files
DIR=.whl
WHEELS=${WHEELS:-/tmp/wheels}
SITE=${SITE:-/tmp/site}

case "${1:-}" in
download)
    mkdir -p "$DIR"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$DIR" "${PACKAGES[@]}"
    ls -l "$DIR"/*.whl
    ;;
split)
    rm -rf "$DIR/carry1" "$DIR/carry2"
    mkdir -p "$DIR/carry1" "$DIR/carry2"
    big="$(ls "$DIR"/nvidia_cutlass_dsl_libs_base-"$DSL_VERSION"-*.whl)"
    (cd "$DIR" && sha256sum ./*.whl > carry1/SHA256SUMS)
    half=$(( ($(stat -c %s "$big") + 1) / 2 ))
    split -b "$half" -d -a 1 "$big" "$DIR/carry1/$(basename "$big").part"
    mv "$DIR/carry1/$(basename "$big").part1" "$DIR/carry2/"
    for w in "$DIR"/*.whl; do [ "$w" = "$big" ] || cp "$w" "$DIR/carry1/"; done
    for d in carry1 carry2; do
        mib=$(( $(du -sb "$DIR/$d" | cut -f1) / 1048576 ))
        [ "$mib" -lt "$LOAD_MIB" ] || { echo "$DIR/$d is $mib MiB, over $LOAD_MIB" >&2; exit 1; }
        echo "$DIR/$d: $mib MiB"
    done
    ;;
stash)
    src=${2:?stash needs the carried folder, e.g. .whl/carry1}
    mkdir -p "$WHEELS"
    cp "$src"/* "$WHEELS"/
    ls -l "$WHEELS"
    ;;
install)
    cd "$WHEELS"
    for first in ./*.whl.part0; do
        cat "$first" "${first%0}1" > "${first%.part0}"
    done
    sha256sum -c SHA256SUMS
    python3 -m pip install -q --no-index --no-deps --target "$SITE" ./*.whl
    echo "export PYTHONPATH=$SITE:$SITE/nvidia_cutlass_dsl/python_packages"
    PYTHONPATH="$SITE:$SITE/nvidia_cutlass_dsl/python_packages" python3 -c "import cutlass; print('cutlass', cutlass.__version__)"
    ;;
*)
    echo "usage: bash benchmarks/carry_wheels.sh download | split | stash FOLDER | install" >&2
    exit 2
    ;;
esac
