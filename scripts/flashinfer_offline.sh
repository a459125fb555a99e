#!/usr/bin/env bash
# Usage: flashinfer_offline.sh fetch DIR [VERSION]
#        flashinfer_offline.sh install DIR TARGET
#
# Brings FlashInfer (the JIT-only py3-none-any wheel, kernels compiled with
# nvcc at first use) to a GPU machine that has no network.
#
#   fetch    (here, with PyPI) downloads flashinfer-python==VERSION and the one
#            requirement the GPU machine lacks (apache-tvm-ffi, a binary wheel
#            for its Python and platform) with --no-deps, packs them into
#            DIR/flashinfer-offline-VERSION.tar.xz, splits that into parts of
#            at most 60 MiB when larger, and writes DIR/SHA256SUMS.
#   install  (there, offline) joins the parts, checks SHA256SUMS, unpacks and
#            installs the wheels into TARGET (pip --no-index --no-deps, or a
#            plain unzip when pip is missing), then imports flashinfer.
#
# DIR must be a folder git ignores (e.g. .whl/flashinfer): wheels never go in
# the repository.  Run with --help for the environment knobs.
set -euo pipefail
unset CDPATH

readonly PROG=flashinfer_offline
readonly DEFAULT_VERSION=0.5.0
# apache-tvm-ffi: flashinfer 0.5.x requires >=0.1,<0.2; pinned to the release
# checked with 0.5.0 on the H200 (torch 2.11+cu130, python 3.12).
readonly TVM_FFI_SPEC="${FI_TVM_FFI_SPEC:-apache-tvm-ffi==0.1.15.post2}"
readonly PY_VERSION="${FI_PY_VERSION:-3.12}"
readonly PLATFORMS="${FI_PLATFORMS:-manylinux_2_28_x86_64 manylinux2014_x86_64}"
readonly PART_SIZE=60M
readonly PART_LIMIT=$((60 * 1024 * 1024))

usage() {
  cat <<EOF
Usage: $PROG.sh fetch DIR [VERSION]     (network; default VERSION $DEFAULT_VERSION)
       $PROG.sh install DIR TARGET      (offline GPU machine)
       $PROG.sh --help

fetch writes into DIR: flashinfer-offline-VERSION.tar.xz (or .tar.xz.partNN
pieces of at most 60 MiB) and SHA256SUMS; nothing else is left there.
install needs python3 and xz; it prints the PYTHONPATH to use.

Environment (fetch):
  FI_PY_VERSION     Python of the GPU machine for binary wheels (default $PY_VERSION)
  FI_PLATFORMS      pip --platform tags, space separated
                    (default "$PLATFORMS")
  FI_TVM_FFI_SPEC   requirement for tvm-ffi (default $TVM_FFI_SPEC)
  FI_EXTRA_REQS     further requirements to fetch (space separated); none are
                    needed on the H200: torch, ninja, numpy, requests, filelock,
                    jinja2, packaging, einops, click, tabulate, tqdm and
                    nvidia-ml-py are there, and nvidia-cudnn-frontend and
                    nvidia-cutlass-dsl are optional at import (left out)
At first use FlashInfer writes its JIT cache to \$FLASHINFER_WORKSPACE_BASE/.cache
(default \$HOME/.cache) and tvm-ffi to \${TVM_FFI_CACHE_DIR:-~/.cache/tvm-ffi}.
EOF
}

die() {
  printf '%s: error: %s\n' "$PROG" "$*" >&2
  exit 2
}

need() {
  command -v "$1" >/dev/null 2>&1 || die "'$1' not found on PATH"
}

human_size() {  # FILE [LABEL]
  local f=$1 n
  n=$(wc -c <"$f")
  printf '%8.2f MiB  %s\n' "$(awk -v n="$n" 'BEGIN { print n / 1048576 }')" "${2:-$f}"
}

cmd_fetch() {
  [[ $# -ge 1 && $# -le 2 ]] || die "fetch takes DIR [VERSION] (got $# arguments)"
  local dir=$1 version=${2:-$DEFAULT_VERSION}
  [[ -n $dir ]] || die "DIR is empty"
  [[ $version =~ ^[0-9]+(\.[0-9]+)+([a-z0-9.]*)?$ ]] \
    || die "VERSION '$version' is not a version number like $DEFAULT_VERSION"
  need python3
  need xz
  need tar
  need split
  python3 -m pip --version >/dev/null 2>&1 || die "python3 -m pip is not available"
  if [[ -e $dir && ! -d $dir ]]; then
    die "DIR '$dir' exists and is not a directory"
  fi
  mkdir -p -- "$dir"
  if git -C "$dir" rev-parse --is-inside-work-tree >/dev/null 2>&1 \
    && ! git -C "$dir" check-ignore -q . 2>/dev/null; then
    die "DIR '$dir' is inside a git work tree but not ignored; use an ignored folder (e.g. .whl/flashinfer)"
  fi

  local stage
  stage=$(mktemp -d "${TMPDIR:-/tmp}/$PROG.XXXXXX")
  # shellcheck disable=SC2064  # expand $stage now, on purpose
  trap "rm -rf -- '$stage'" EXIT
  mkdir -p "$stage/wheels"

  echo "$PROG: downloading flashinfer-python==$version (pure py3-none-any wheel)"
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --dest "$stage/wheels" "flashinfer-python==$version" \
    || die "pip download of flashinfer-python==$version failed (no wheel for that version? wheels start at 0.5.0)"
  local fi_whl
  fi_whl=$(find "$stage/wheels" -name 'flashinfer_python-*-py3-none-any.whl' | head -n 1)
  [[ -n $fi_whl ]] || die "flashinfer-python==$version is not a py3-none-any wheel"

  local -a plat_args=()
  local p
  for p in $PLATFORMS; do plat_args+=(--platform "$p"); done
  local -a reqs=("$TVM_FFI_SPEC")
  if [[ -n ${FI_EXTRA_REQS:-} ]]; then
    # shellcheck disable=SC2206  # word splitting is the interface here
    reqs+=($FI_EXTRA_REQS)
  fi
  local r
  for r in "${reqs[@]}"; do
    echo "$PROG: downloading $r (python $PY_VERSION, ${PLATFORMS// /, })"
    python3 -m pip download --quiet --no-deps --only-binary=:all: \
      --python-version "$PY_VERSION" --implementation cp "${plat_args[@]}" \
      --dest "$stage/wheels" "$r" \
      || die "pip download of '$r' failed"
  done

  local base="flashinfer-offline-$version.tar.xz"
  rm -f -- "$dir/$base" "$dir/$base".part* "$dir/SHA256SUMS"
  echo "$PROG: packing (xz -9)"
  tar -C "$stage" -cf - wheels | xz -9 -T1 >"$stage/$base"
  local size
  size=$(wc -c <"$stage/$base")
  if ((size > PART_LIMIT)); then
    split -b "$PART_SIZE" -d -a 2 -- "$stage/$base" "$dir/$base.part"
  else
    mv -- "$stage/$base" "$dir/$base"
  fi
  (cd -- "$dir" && sha256sum -- "$base"* >SHA256SUMS)

  echo "$PROG: wheels:"
  local w
  for w in "$stage"/wheels/*.whl; do human_size "$w" "$(basename -- "$w")"; done
  echo "$PROG: made in $dir:"
  for w in "$dir/$base"* "$dir/SHA256SUMS"; do human_size "$w"; done
  echo "$PROG: on the GPU machine: bash scripts/$PROG.sh install $dir TARGET"
}

cmd_install() {
  [[ $# -eq 2 ]] || die "install takes DIR TARGET (got $# arguments)"
  local dir=$1 target=$2
  [[ -n $dir && -n $target ]] || die "DIR and TARGET must not be empty"
  [[ -d $dir ]] || die "DIR '$dir' is not a directory"
  need python3
  need xz
  need tar

  shopt -s nullglob
  local -a parts=("$dir"/flashinfer-offline-*.tar.xz.part* )
  local -a whole=("$dir"/flashinfer-offline-*.tar.xz)
  shopt -u nullglob
  local -a inputs
  if ((${#parts[@]} > 0)); then
    inputs=("${parts[@]}")  # glob order is sorted: part00, part01, ...
  elif ((${#whole[@]} == 1)); then
    inputs=("${whole[@]}")
  elif ((${#whole[@]} > 1)); then
    die "several archives in '$dir' (${whole[*]}); keep one"
  else
    die "no flashinfer-offline-*.tar.xz[.partNN] in '$dir'; run 'fetch' first"
  fi
  local stems
  stems=$(printf '%s\n' "${inputs[@]}" | sed 's/\.part[0-9]*$//' | sort -u | wc -l)
  ((stems == 1)) || die "parts of more than one archive in '$dir'; keep one version"

  if [[ -f $dir/SHA256SUMS ]]; then
    if command -v sha256sum >/dev/null 2>&1; then
      (cd -- "$dir" && sha256sum --quiet -c SHA256SUMS) \
        || die "checksum mismatch in '$dir' (incomplete copy?)"
    fi
  else
    echo "$PROG: warning: no SHA256SUMS in '$dir'; not verified" >&2
  fi

  local stage
  stage=$(mktemp -d "${TMPDIR:-/tmp}/$PROG.XXXXXX")
  # shellcheck disable=SC2064  # expand $stage now, on purpose
  trap "rm -rf -- '$stage'" EXIT
  cat -- "${inputs[@]}" | xz -dc | tar -C "$stage" -xf - \
    || die "could not unpack ${inputs[0]} (corrupt or incomplete parts?)"
  shopt -s nullglob
  local -a wheels=("$stage"/wheels/*.whl)
  shopt -u nullglob
  ((${#wheels[@]} > 0)) || die "the archive holds no wheels"

  mkdir -p -- "$target" || die "cannot create TARGET '$target'"
  target=$(cd -- "$target" && pwd -P)
  if python3 -m pip --version >/dev/null 2>&1; then
    echo "$PROG: pip install --no-deps --no-index --target $target"
    python3 -m pip install --quiet --disable-pip-version-check --no-deps \
      --no-index --upgrade --target "$target" "${wheels[@]}" \
      || die "pip install into '$target' failed"
  else
    echo "$PROG: pip unavailable; unzipping the wheels into $target"
    local w
    for w in "${wheels[@]}"; do
      python3 -m zipfile -e "$w" "$target" || die "could not unzip $(basename -- "$w")"
    done
  fi

  echo "$PROG: installed into $target; use:"
  echo "PYTHONPATH=$target"
  local version
  version=$(PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}" \
    python3 -c 'import flashinfer; print(flashinfer.__version__)') \
    || die "'import flashinfer' failed with PYTHONPATH=$target"
  echo "$PROG: import flashinfer OK, version $version"
}

main() {
  [[ $# -ge 1 ]] || { usage >&2; die "missing subcommand (fetch or install)"; }
  local sub=$1
  shift
  case $sub in
    fetch) cmd_fetch "$@" ;;
    install) cmd_install "$@" ;;
    -h | --help | help) usage ;;
    *) die "unknown subcommand '$sub' (expected fetch or install)" ;;
  esac
}

main "$@"
