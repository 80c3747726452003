#!/usr/bin/env bash
# tools/devdeps.sh — fills .devdeps/ with what the GPU machine lacks and cannot download there:
#   root/usr/include/toml++              toml++ headers (Debian's libtomlplusplus-dev, apt-get
#                                        download)
#   boost_program_options/src            Boost.Program_options sources, of the Boost version the
#                                        GPU machine's headers have (LAV_GPU_BOOST_VERSION, 1.83):
#                                        Boost's own sources from the orig tarball of Debian's
#                                        source package boost<version> (Debian's patches are not
#                                        applied), which apt-get source downloads from the Debian
#                                        suite LAV_GPU_BOOST_SUITE (trixie); the tarball's
#                                        boost/version.hpp must say that version
#   wheels/                              fla-core (flash-linear-attention's kernels) and einops,
#                                        the benchmark's peer (pip download)
# Runs on a Debian machine. Everything comes through apt-get and pip, by package name. For the
# Boost sources apt-get runs with a private configuration under a temporary folder (its own
# sources, lists and cache; the machine's apt state is not touched): one deb-src entry for
# LAV_GPU_BOOST_SUITE on the archive this machine's own apt sources use for its Debian release
# (LAV_DEBIAN_ARCHIVE overrides it). Needs no root. Name .devdeps in the device tool's carry.
# Safe to run again: each part is skipped when it is there (delete it to fetch it again).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .devdeps && cd .devdeps

if [ ! -f root/usr/include/toml++/toml.h ]; then
    apt-get -o "APT::Sandbox::User=$(id -un)" download libtomlplusplus-dev >/dev/null
    dpkg-deb -x libtomlplusplus-dev_*.deb root
fi

boost="${LAV_GPU_BOOST_VERSION:-1.83}"
suite="${LAV_GPU_BOOST_SUITE:-trixie}"
if [ ! -f boost_program_options/src/cmdline.cpp ]; then
    archive="${LAV_DEBIAN_ARCHIVE:-}"
    if [ -z "$archive" ]; then
        # the archive of this machine's release, as its apt sources name it
        codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
        archive="$(apt-get indextargets --format '$(REPO_URI)' "Release: $codename" \
            "Target-Of: deb" 2>/dev/null | head -1)"
    fi
    if [ -z "$archive" ]; then
        echo "devdeps: no Debian archive in this machine's apt sources; set LAV_DEBIAN_ARCHIVE" >&2
        exit 1
    fi
    echo "devdeps: Boost.Program_options ${boost} sources: apt-get source boost${boost}" \
        "(${suite}, from ${archive})" >&2
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/sources.list.d" "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/src"
    : >"$tmp/sources.list"
    {
        echo "Types: deb-src"
        echo "URIs: $archive"
        echo "Suites: $suite"
        echo "Components: main"
        if [ -f /usr/share/keyrings/debian-archive-keyring.gpg ]; then
            echo "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"
        fi
    } >"$tmp/sources.list.d/boost.sources"
    apt_private=(-o "Dir::Etc::SourceList=$tmp/sources.list"
                 -o "Dir::Etc::SourceParts=$tmp/sources.list.d"
                 -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache"
                 -o "APT::Sandbox::User=$(id -un)")
    apt-get "${apt_private[@]}" -qq update
    (cd "$tmp/src" && apt-get "${apt_private[@]}" -qq source --download-only "boost${boost}")
    orig=("$tmp"/src/boost"${boost}"_*.orig.tar.*)
    tar -xf "${orig[0]}" -C "$tmp/src" --no-same-owner --wildcards '*/boost/version.hpp' \
        '*/libs/program_options/src/*'
    # the sources must be of the version of the headers they are compiled against
    want="$(echo "$boost" | awk -F. '{ printf "%d%03d%02d", $1, $2, ($3 == "" ? 0 : $3) }')"
    version_hpp="$(find "$tmp/src" -path '*/boost/version.hpp' | head -1)"
    have="$(sed -n 's/^#define BOOST_VERSION \([0-9]*\).*/\1/p' "${version_hpp:-/dev/null}")"
    if [ "$have" != "$want" ]; then
        echo "devdeps: ${orig[0]##*/} is Boost ${have:-of no known version}, not ${want}" >&2
        exit 1
    fi
    rm -rf boost_program_options && mkdir -p boost_program_options
    mv "$tmp"/src/*/libs/program_options/src boost_program_options/src
    echo "devdeps: Boost.Program_options sources of BOOST_VERSION ${have} (${orig[0]##*/})" >&2
fi

if ! ls wheels/fla_core-*.whl wheels/einops-*.whl >/dev/null 2>&1; then
    python3 -m pip download -q --no-deps -d wheels "fla-core==${LAV_FLA_VERSION:-0.6.0}" einops
fi
echo "devdeps: ready ($(du -sh . | cut -f1))" >&2
