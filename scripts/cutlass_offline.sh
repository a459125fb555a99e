#!/usr/bin/env bash
# Usage: cutlass_offline.sh fetch DIR
#        cutlass_offline.sh verify WHEEL_DIR
#        cutlass_offline.sh install DIR TARGET
#        cutlass_offline.sh check
#
# Brings the CUTLASS C++ headers (--impl cutlass) and CuTe DSL (--impl cute-dsl)
# to a GPU machine that has no network.
#
#   fetch    (here, with PyPI) downloads the pinned wheels into DIR/wheels (kept
#            there and reused by a later fetch), checks each against the sha256
#            recorded below, rewrites them with their members stored instead of
#            deflated (same files, same RECORD), packs them with xz -9 into
#            DIR/carry/cutlass-offline.tar.xz and writes DIR/carry/SHA256SUMS.
#            Only DIR/carry travels: name it in the device call's carry list.
#   verify   checks the wheels in WHEEL_DIR against the recorded sha256 (fetch
#            runs it before packing; it needs no network).
#   install  (there, offline) checks SHA256SUMS, unpacks, checks every member
#            of every wheel against the wheel's RECORD, installs them into
#            TARGET (pip --no-index --no-deps --target, or a plain unzip when
#            pip is missing), imports cutlass.cute, and prints on stdout the
#            `export` lines to eval (PYTHONPATH and CUTLASS_PATH); its messages
#            go to stderr.  Exit 1 (exports still printed) when the headers are
#            there but `import cutlass.cute` fails.
#   check    prints what `python3 helpers/kloop.py env --json` sees about CUTLASS
#            and CuTe DSL (exit 0 when both are found, 1 otherwise).
#
# What travels (pins recorded 2026-12-02, pip download for Python 3.12,
# manylinux x86-64; sizes in bytes):
#   nvidia-cutlass==4.2.0.0  py3-none-any, 6440597: the CUTLASS 4.2 tree under
#            cutlass_library/source (include/{cutlass,cute}, tools/util/include);
#            install points CUTLASS_PATH there.  Its Requires-Dist (cuda-python,
#            networkx, numpy, pydot, scipy, treelib) serve only its Python code
#            generator and are not needed for the headers.
#   nvidia-cutlass-dsl==4.2.1  cp312 manylinux_2_28, 62230361 (one wheel).
#            Requires-Dist: numpy, typing-extensions, cuda-python>=12.8; the
#            H200 image has numpy, typing-extensions and cuda-bindings (the
#            only part of cuda-python the DSL imports), so nothing else goes.
# Why CuTe DSL 4.2.1: one device call carries 64 MiB in all, the working tree
# (about 6.2 MiB) included, and nothing left on the device survives between
# calls (30 s), so the DSL must travel whole in one call; splitting into parts
# for several calls is no use.
#   - 4.8.1 (newest) is a 10 KB stub needing -libs-base (3050567 bytes),
#     -libs-core (1635096) and -libs-cu12 or -libs-cu13 (91954433): over the
#     limit as wheels, and repacked too (the 193 MB _cutlass_ir .so of -cu13
#     alone is 51793736 bytes after xz -6, beside a 44 MB runtime .so).
#   - 4.1.0 (57958663 bytes) fits, but requires cuda-python<13 and creates its
#     context with cuCtxCreate(0, dev), an API cuda-bindings 13 removed; the
#     H200 has CUDA 13 (driver 580, cuda-bindings 13).
#   - 4.2.1 (62230361 bytes, cuda-python>=12.8) handles cuda-bindings 13
#     (cuCtxCreate v4 when CUDA_VERSION >= 13000).  As a wheel it does not fit
#     beside the tree and the CUTLASS wheel (59.35 + 6.14 + 6.25 MiB), but its
#     members compress far better with xz than with the wheel's deflate: the
#     archive of both wheels is 42.47 MiB, so archive + tree is 48.72 MiB
#     (measured 2026-12-02), which leaves about 15 MiB for the tree to grow.
# fetch prints the archive size, the tree size and what is left of 64 MiB.
# Checked here (2026-12-02, no GPU): install into Python 3.12, then
# `import cutlass.cute` of 4.2.1 with numpy 2.5 and cuda-bindings 13.5.0.  Not
# yet run on the H200 (its cuda-bindings version was not read).  The DSL finds
# the CUDA toolkit through CUDA_TOOLKIT_PATH or nvcc; set it if it warns.
#
# On the GPU machine, with DIR/carry in the call's carry list:
#   bash scripts/cutlass_offline.sh install .whl/cutlass/carry /tmp/kl-cutlass \
#     >/tmp/kl-cutlass.env && . /tmp/kl-cutlass.env && \
#   bash scripts/cutlass_offline.sh check
# PYTHONPATH must hold TARGET/nvidia_cutlass_dsl/python_packages as well as
# TARGET: the DSL's .pth file is not read from a PYTHONPATH folder.
#
# DIR must be a folder git ignores (e.g. .whl/cutlass): wheels never go in the
# repository.  Run with --help for the environment knobs.
set -euo pipefail
unset CDPATH

readonly PROG=cutlass_offline
ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)
readonly ROOT
readonly ARCHIVE=cutlass-offline.tar.xz
readonly CALL_LIMIT=$((64 * 1024 * 1024))
# "sha256  wheel file name", as sha256sum writes them (recorded 2026-12-02).
readonly DEFAULT_PINS="\
f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6  nvidia_cutlass-4.2.0.0-py3-none-any.whl
d7ddc9c1f5bb803718d736c907fac857fc606f1fce630c0b1d741935a72723b9  nvidia_cutlass_dsl-4.2.1-cp312-cp312-manylinux_2_28_x86_64.whl"
readonly PY_VERSION="${CUTLASS_OFFLINE_PY_VERSION:-3.12}"
readonly PLATFORMS="${CUTLASS_OFFLINE_PLATFORMS:-manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64}"

usage() {
  cat <<EOF
Usage: $PROG.sh fetch DIR                (network: PyPI)
       $PROG.sh verify WHEEL_DIR         (no network)
       $PROG.sh install DIR TARGET       (offline GPU machine; DIR holds $ARCHIVE)
       $PROG.sh check                    (what 'kloop.py env --json' sees)
       $PROG.sh --help

fetch writes DIR/wheels/*.whl (the pinned wheels, kept) and DIR/carry/
($ARCHIVE and SHA256SUMS, the folder to carry).
install needs python3; it prints the export lines to eval on stdout, e.g.
  bash scripts/$PROG.sh install DIR/carry /tmp/kl-cutlass >/tmp/kl-cutlass.env && . /tmp/kl-cutlass.env

Environment:
  CUTLASS_OFFLINE_PINS         a file of "sha256  wheel-file-name" lines used
                               instead of the pins recorded in this script (to
                               carry other versions: check the sums yourself)
  CUTLASS_OFFLINE_PY_VERSION   Python of the GPU machine for binary wheels
                               (default $PY_VERSION)
  CUTLASS_OFFLINE_PLATFORMS    pip --platform tags, space separated
                               (default "$PLATFORMS")
EOF
}

die() {
  printf '%s: error: %s\n' "$PROG" "$*" >&2
  exit 2
}

say() {
  printf '%s: %s\n' "$PROG" "$*" >&2
}

need() {
  command -v "$1" >/dev/null 2>&1 || die "'$1' not found on PATH"
}

human_size() {  # FILE [LABEL]
  local f=$1 n
  n=$(wc -c <"$f")
  printf '%8.2f MiB  %s\n' "$(awk -v n="$n" 'BEGIN { print n / 1048576 }')" "${2:-$f}" >&2
}

mib() {  # BYTES
  awk -v n="$1" 'BEGIN { printf "%.2f", n / 1048576 }'
}

pins() {  # the pin lines: "sha256  name"
  if [[ -n ${CUTLASS_OFFLINE_PINS:-} ]]; then
    [[ -f $CUTLASS_OFFLINE_PINS ]] || die "CUTLASS_OFFLINE_PINS '$CUTLASS_OFFLINE_PINS' is not a file"
    grep -Ev '^[[:space:]]*(#|$)' -- "$CUTLASS_OFFLINE_PINS" || true
  else
    printf '%s\n' "$DEFAULT_PINS"
  fi
}

# The Python side: rewriting a wheel with stored members, checking a wheel
# against its RECORD, packing and unpacking the archive, reading .pth files.
pyhelp() {  # CMD ARGS...
  python3 - "$@" <<'PY'
import base64, csv, hashlib, io, os, shutil, sys, tarfile, zipfile

def fail(msg):
    print(f"cutlass_offline: error: {msg}", file=sys.stderr)
    sys.exit(2)

def record_check(whl):
    try:
        z = zipfile.ZipFile(whl)
    except (OSError, zipfile.BadZipFile) as exc:
        fail(f"{os.path.basename(whl)} is not a wheel (zip): {exc}")
    with z:
        names = [n for n in z.namelist() if not n.endswith("/")]
        recs = [n for n in names if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
        if len(recs) != 1:
            fail(f"{os.path.basename(whl)} has {len(recs)} .dist-info/RECORD files, not one")
        listed, bad = set(), []
        for row in csv.reader(io.StringIO(z.read(recs[0]).decode("utf-8"))):
            if not row:
                continue
            path, digest = row[0], (row[1] if len(row) > 1 else "")
            listed.add(path)
            if not digest:
                continue
            algo, _, want = digest.partition("=")
            try:
                h = hashlib.new(algo)
                with z.open(path) as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
            except (KeyError, ValueError):
                bad.append(path)
                continue
            if base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode() != want:
                bad.append(path)
        bad += [n for n in names if n not in listed]
        if bad:
            fail(f"{os.path.basename(whl)}: {len(bad)} member(s) differ from its RECORD: {', '.join(bad[:5])}")

def store(src, dst):
    with zipfile.ZipFile(src) as zi, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zo:
        for info in zi.infolist():
            new = zipfile.ZipInfo(info.filename, info.date_time)
            new.external_attr, new.compress_type = info.external_attr, zipfile.ZIP_STORED
            with zi.open(info) as f, zo.open(new, "w", force_zip64=info.file_size >= 1 << 31) as g:
                shutil.copyfileobj(f, g, 1 << 20)

def normal(ti):
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    ti.mtime = 0
    ti.mode = 0o755 if ti.isdir() else 0o644
    return ti

def pack(stage, out):
    names = sorted(os.listdir(os.path.join(stage, "wheels")))
    size = sum(os.path.getsize(os.path.join(stage, "wheels", n)) for n in names)
    with tarfile.open(out, "w:xz", preset=9 if size > 32 << 20 else 6) as t:
        t.add(os.path.join(stage, "wheels"), "wheels", recursive=False, filter=normal)
        for name in names:
            t.add(os.path.join(stage, "wheels", name), f"wheels/{name}", filter=normal)

def unpack(archive, dest):
    try:
        with tarfile.open(archive, "r:xz") as t:
            members = t.getmembers()
            for m in members:
                ok = m.name == "wheels" and m.isdir() or (
                    m.isfile() and m.name.startswith("wheels/") and m.name.count("/") == 1
                    and m.name.endswith(".whl"))
                if not ok:
                    fail(f"unexpected member '{m.name}' in {archive}")
            if hasattr(tarfile, "data_filter"):
                t.extractall(dest, members, filter="data")
            else:
                t.extractall(dest, members)
    except (OSError, EOFError, tarfile.TarError) as exc:
        fail(f"could not unpack {archive} (corrupt or incomplete?): {exc}")

def pth_dirs(target):
    for name in sorted(os.listdir(target)):
        if not name.endswith(".pth"):
            continue
        with open(os.path.join(target, name), encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith(("#", "import ")):
                    d = os.path.normpath(os.path.join(target, line))
                    if os.path.isdir(d):
                        print(d)

cmd, args = sys.argv[1], sys.argv[2:]
if cmd == "record":
    for w in args:
        record_check(w)
elif cmd == "store":
    store(*args)
elif cmd == "pack":
    pack(*args)
elif cmd == "unpack":
    unpack(*args)
elif cmd == "pth":
    pth_dirs(*args)
else:
    fail(f"pyhelp: unknown command {cmd}")
PY
}

# verify_wheels DIR: every pinned wheel is in DIR with its recorded sha256.
verify_wheels() {
  local dir=$1 want name got bad=0 n=0
  need sha256sum
  while read -r want name; do
    [[ -n $want ]] || continue
    [[ $want =~ ^[0-9a-f]{64}$ && -n $name ]] || die "bad pin line '$want $name' (want: sha256  wheel-file-name)"
    n=$((n + 1))
    if [[ ! -f $dir/$name ]]; then
      printf '%s: missing: %s\n' "$PROG" "$dir/$name" >&2
      bad=1
      continue
    fi
    got=$(sha256sum -- "$dir/$name" | cut -d' ' -f1)
    if [[ $got != "$want" ]]; then
      printf '%s: sha256 mismatch: %s\n  recorded %s\n  found    %s\n' "$PROG" "$dir/$name" "$want" "$got" >&2
      bad=1
    else
      say "sha256 OK: $name"
    fi
  done < <(pins)
  ((n > 0)) || die "no pins"
  ((bad == 0)) || die "wheels in '$dir' do not match the recorded sha256 (delete them and fetch again; never carry them)"
}

# download_missing DIR: pip download each pinned wheel that DIR lacks.
download_missing() {
  local dir=$1 want name dist version rest
  local -a plat_args=()
  local p
  for p in $PLATFORMS; do plat_args+=(--platform "$p"); done
  while read -r want name; do
    [[ -n $name && ! -f $dir/$name ]] || continue
    python3 -m pip --version >/dev/null 2>&1 || die "python3 -m pip is not available (needed to download $name)"
    IFS=- read -r dist version rest <<<"${name%.whl}"
    [[ -n $dist && -n $version && -n $rest ]] || die "cannot read a name and version from '$name'"
    dist=${dist//_/-}
    say "downloading $dist==$version ($name)"
    if [[ $rest == py3-none-any ]]; then
      python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        --dest "$dir" "$dist==$version" </dev/null || die "pip download of $dist==$version failed"
    else
      python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version "$PY_VERSION" --implementation cp "${plat_args[@]}" \
        --dest "$dir" "$dist==$version" </dev/null || die "pip download of $dist==$version failed"
    fi
    [[ -f $dir/$name ]] || die "pip fetched $dist==$version but not as $name (another platform tag?)"
  done < <(pins)
}

tree_bytes() {  # the working tree a device call carries: tracked + untracked, not ignored
  if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # a tracked file deleted but not yet committed is not carried: stat skips it (and xargs's 123 is no error here)
    (cd -- "$ROOT" && { git ls-files -co --exclude-standard -z | xargs -0 -r stat -c %s -- 2>/dev/null || true; }) \
      | awk '{ s += $1 } END { print s + 0 }'
  else
    echo 0
  fi
}

cmd_fetch() {
  [[ $# -eq 1 ]] || die "fetch takes DIR (got $# arguments)"
  local dir=$1
  [[ -n $dir ]] || die "DIR is empty"
  need python3
  need sha256sum
  if [[ -e $dir && ! -d $dir ]]; then
    die "DIR '$dir' exists and is not a directory"
  fi
  mkdir -p -- "$dir/wheels" "$dir/carry"
  if git -C "$dir" rev-parse --is-inside-work-tree >/dev/null 2>&1 \
    && ! git -C "$dir" check-ignore -q . 2>/dev/null; then
    die "DIR '$dir' is inside a git work tree but not ignored; use an ignored folder (e.g. .whl/cutlass)"
  fi
  local whl=$dir/wheels carry=$dir/carry
  download_missing "$whl"
  verify_wheels "$whl"

  local stage
  stage=$(mktemp -d "${TMPDIR:-/tmp}/$PROG.XXXXXX")
  # shellcheck disable=SC2064  # expand $stage now, on purpose
  trap "rm -rf -- '$stage'" EXIT
  mkdir -p "$stage/wheels"
  local want name
  while read -r want name; do
    [[ -n $name ]] || continue
    say "rewriting $name with stored members"
    pyhelp store "$whl/$name" "$stage/wheels/$name"
    pyhelp record "$stage/wheels/$name"
  done < <(pins)

  rm -f -- "$carry/$ARCHIVE" "$carry/SHA256SUMS"
  say "packing (xz -9; a few minutes)"
  pyhelp pack "$stage" "$stage/$ARCHIVE"
  mv -- "$stage/$ARCHIVE" "$carry/$ARCHIVE"
  (cd -- "$carry" && sha256sum -- "$ARCHIVE" >SHA256SUMS)

  say "wheels:"
  local w
  for w in "$whl"/*.whl; do human_size "$w" "$(basename -- "$w")"; done
  say "made in $carry:"
  for w in "$carry/$ARCHIVE" "$carry/SHA256SUMS"; do human_size "$w"; done
  local carried tree total
  carried=$(cat -- "$carry/$ARCHIVE" "$carry/SHA256SUMS" | wc -c)
  tree=$(tree_bytes)
  total=$((carried + tree))
  say "one device call: $(mib "$carried") MiB carried + $(mib "$tree") MiB working tree = $(mib "$total") MiB of 64 MiB"
  if ((carried > CALL_LIMIT)); then
    die "the archive alone is over 64 MiB: it cannot travel in one call"
  elif ((total > CALL_LIMIT)); then
    say "warning: archive + working tree is over 64 MiB; a device call would refuse it"
  fi
  say "on the GPU machine (carry $carry): bash scripts/$PROG.sh install $carry TARGET"
}

cmd_verify() {
  [[ $# -eq 1 ]] || die "verify takes WHEEL_DIR (got $# arguments)"
  [[ -d $1 ]] || die "WHEEL_DIR '$1' is not a directory"
  verify_wheels "$1"
}

cmd_install() {
  [[ $# -eq 2 ]] || die "install takes DIR TARGET (got $# arguments)"
  local dir=$1 target=$2
  [[ -n $dir && -n $target ]] || die "DIR and TARGET must not be empty"
  [[ -d $dir ]] || die "DIR '$dir' is not a directory"
  [[ -f $dir/$ARCHIVE || ! -f $dir/carry/$ARCHIVE ]] || dir=$dir/carry
  [[ -f $dir/$ARCHIVE ]] || die "no $ARCHIVE in '$dir'; run 'fetch' first and carry DIR/carry"
  need python3

  if [[ -f $dir/SHA256SUMS ]]; then
    if command -v sha256sum >/dev/null 2>&1; then
      (cd -- "$dir" && sha256sum --quiet -c SHA256SUMS) \
        || die "checksum mismatch in '$dir' (incomplete copy?)"
    else
      say "warning: sha256sum not found; SHA256SUMS not checked (RECORDs still are)"
    fi
  else
    say "warning: no SHA256SUMS in '$dir'; only the wheels' RECORDs are checked"
  fi

  local stage
  stage=$(mktemp -d "${TMPDIR:-/tmp}/$PROG.XXXXXX")
  # shellcheck disable=SC2064  # expand $stage now, on purpose
  trap "rm -rf -- '$stage'" EXIT
  pyhelp unpack "$dir/$ARCHIVE" "$stage"
  shopt -s nullglob
  local -a wheels=("$stage"/wheels/*.whl)
  shopt -u nullglob
  ((${#wheels[@]} > 0)) || die "the archive holds no wheels"
  pyhelp record "${wheels[@]}"

  mkdir -p -- "$target" || die "cannot create TARGET '$target'"
  target=$(cd -- "$target" && pwd -P)
  if python3 -m pip --version >/dev/null 2>&1; then
    say "pip install --no-index --no-deps --target $target"
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check \
      --no-deps --no-index --no-compile \
      --no-cache-dir --upgrade --target "$target" "${wheels[@]}" >&2 \
      || die "pip install into '$target' failed"
  else
    say "pip unavailable; unzipping the wheels into $target"
    local w
    for w in "${wheels[@]}"; do
      python3 -m zipfile -e "$w" "$target" || die "could not unzip $(basename -- "$w")"
    done
  fi

  local -a path=()
  local d
  while IFS= read -r d; do path+=("$d"); done < <(pyhelp pth "$target")
  path+=("$target")
  local pypath
  pypath=$(IFS=:; printf '%s' "${path[*]}")
  local cutlass=$target/cutlass_library/source
  if [[ -f $cutlass/include/cutlass/cutlass.h && -f $cutlass/include/cute/tensor.hpp ]]; then
    printf 'export CUTLASS_PATH=%q\n' "$cutlass"
    say "CUTLASS headers: $cutlass/include"
  else
    say "warning: no CUTLASS headers (cutlass_library/source/include) in $target"
    cutlass=
  fi
  # shellcheck disable=SC2016  # ${PYTHONPATH...} is expanded by the caller's eval
  printf 'export PYTHONPATH=%q${PYTHONPATH:+:$PYTHONPATH}\n' "$pypath"

  local out
  if out=$(PYTHONPATH="$pypath${PYTHONPATH:+:$PYTHONPATH}" python3 -c '
import importlib.metadata as m
import cutlass, cutlass.cute  # noqa: F401
print(m.version("nvidia-cutlass-dsl"))' 2>&1); then
    say "import cutlass.cute OK, nvidia-cutlass-dsl $(tail -n 1 <<<"$out")"
  elif [[ -n $cutlass ]]; then
    say "error: 'import cutlass.cute' failed with PYTHONPATH=$pypath (the CUTLASS headers are usable):"
    tail -n 15 <<<"$out" >&2
    exit 1
  else
    die "'import cutlass.cute' failed and no CUTLASS headers were installed: $(tail -n 3 <<<"$out")"
  fi
}

cmd_check() {
  [[ $# -eq 0 ]] || die "check takes no arguments"
  need python3
  local json rc=0
  json=$(cd -- "$ROOT" && python3 helpers/kloop.py env --json) || rc=$?
  ((rc == 0 || rc == 2)) || die "'kloop.py env --json' failed (exit $rc)"
  KL_ENV_JSON=$json python3 - <<'PY'
import json, os, sys
r = json.loads(os.environ["KL_ENV_JSON"])
c, d = r.get("cutlass") or {}, r.get("cute_dsl") or {}
src = " (from %s)" % c["source"] if c.get("source") else ""
print("CUTLASS include:     %s%s" % (c.get("include") or "not found", src))
print("nvidia-cutlass:      %s" % (c.get("package_version") or "not installed"))
print("nvidia-cutlass-dsl:  %s" % (d.get("version") or "not installed"))
print("import cutlass.cute: %s" % (d.get("import") or "not tried"))
ok = bool(c.get("include")) and d.get("import") == "ok"
for k in r.get("checks", []):
    if k["item"] in ("CUTLASS headers", "nvidia-cutlass-dsl"):
        fix = " -> %s" % k["fix"] if k.get("fix") else ""
        print("check %s: %s (%s): %s%s" % (k["item"], k["status"], k["level"], k["detail"], fix))
        ok = ok and k["status"] == "ok"
sys.exit(0 if ok else 1)
PY
}

main() {
  [[ $# -ge 1 ]] || { usage >&2; die "missing subcommand (fetch, verify, install or check)"; }
  local sub=$1
  shift
  case $sub in
    fetch) cmd_fetch "$@" ;;
    verify) cmd_verify "$@" ;;
    install) cmd_install "$@" ;;
    check) cmd_check "$@" ;;
    -h | --help | help) usage ;;
    *) die "unknown subcommand '$sub' (expected fetch, verify, install or check)" ;;
  esac
}

main "$@"
