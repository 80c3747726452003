#!/usr/bin/env bash
# tools/devdeps.sh — fills .devdeps/ with what the GPU machine lacks and cannot download there:
#   root/usr/include/toml++              toml++ headers (Debian's libtomlplusplus-dev)
#   boost_program_options/src            Boost.Program_options sources, of the Boost version the
#                                        GPU machine's headers have (LAV_GPU_BOOST_VERSION, 1.83)
#   wheels/                              fla-core (flash-linear-attention's kernels) and einops,
#                                        the benchmark's peer
# Name .devdeps in the device tool's carry. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .devdeps && cd .devdeps

if [ ! -f root/usr/include/toml++/toml.h ]; then
    apt-get download libtomlplusplus-dev >/dev/null
    dpkg-deb -x libtomlplusplus-dev_*.deb root
fi

boost="${LAV_GPU_BOOST_VERSION:-1.83}"
if [ ! -f boost_program_options/src/cmdline.cpp ]; then
    url="http://deb.debian.org/debian/pool/main/b/boost${boost}/boost${boost}_${boost}.0.orig.tar.xz"
    echo "devdeps: Boost.Program_options ${boost} sources from ${url}" >&2
    tmp="$(mktemp -d)"
    curl -fsSL "$url" | tar -xJ -C "$tmp" --wildcards '*/libs/program_options/src/*'
    mkdir -p boost_program_options
    mv "$tmp"/*/libs/program_options/src boost_program_options/src
    rm -rf "$tmp"
fi

if ! ls wheels/fla_core-*.whl wheels/einops-*.whl >/dev/null 2>&1; then
    python3 -m pip download -q --no-deps -d wheels "fla-core==${LAV_FLA_VERSION:-0.6.0}" einops
fi
echo "devdeps: ready ($(du -sh . | cut -f1))" >&2
