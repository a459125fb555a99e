# shellcheck shell=bash
# Shared set-up for the gate tests (tests/gate/*.bats).
#
# Run:   BATS_LIB_PATH=$PWD/node_modules node_modules/bats/bin/bats tests/gate
# Each test gets a hermetic run directory "$OUT" (its path holds a space to catch
# quoting bugs), a temporary HOME and a reset PATH.  make_run builds a complete,
# valid v0; make_version K adds a valid vK whose kernel differs from v(K-1);
# measure K signs vK's correctness, profile and kbs records like the helpers do.
# make_run and advance_to N build a run once per .bats file (per RUN_ITERATIONS and DEVICE) and copy it,
# with the key that signed it, into an empty "$OUT" for every later test of that file.
#
# Records are signed here with openssl (the helpers use Python's hmac, the gate
# plain bash and sha256sum: three implementations of one format, see
# references/artifacts.md), with a key of the test's own in $BATS_TEST_TMPDIR.
#
# failsafe.bats holds one test that must fail; it is skipped unless
# BATS_RUN_FAILSAFE=1 (then bats reports exactly that one failure).

# bats-support and bats-assert where bats_load_library finds them (BATS_LIB_PATH), their src/*.bash sourced here:
# their load.bash starts a dirname process for each of those files, some 18 processes for every test
load_lib() {
  local dir dirs f
  IFS=: read -ra dirs <<<"${BATS_LIB_PATH:-}"
  for dir in "${dirs[@]}"; do
    [[ -f $dir/$1/load.bash ]] || continue
    for f in "$dir/$1"/src/*.bash; do
      # shellcheck source=/dev/null
      source "$f"
    done
    return 0
  done
  bats_load_library "$1"
}
load_lib bats-support
load_lib bats-assert

REPO_ROOT=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
# GATE_UNDER_TEST lets failsafe.bats run the suite against a sabotaged copy.
GATE="${GATE_UNDER_TEST:-$REPO_ROOT/scripts/check_iteration_gate.sh}"
export GATE_LOCK_TIMEOUT=20

setup() {
  TEST_HOME="$BATS_TEST_TMPDIR/home dir"
  OUT="$BATS_TEST_TMPDIR/kernel run"
  mkdir -p "$TEST_HOME" "$OUT"
  export HOME="$TEST_HOME" PATH=/usr/local/bin:/usr/bin:/bin
  export KERNEL_LOOP_RECORD_KEY="$BATS_TEST_TMPDIR/record key"
  openssl rand -hex 32 >"$KERNEL_LOOP_RECORD_KEY"
}

# The fixtures start few processes (each costs milliseconds, and the suite builds hundreds of runs):
# file reads are bash builtins and several files are hashed by one sha256sum.
sha() { local s; s=$(sha256sum <"$1") && printf '%s' "${s%% *}"; }

# shas FILE...: the sha256 of each file, in order, into the array SHAS (one sha256sum process).
shas() {
  local out=() line
  SHAS=()
  mapfile -t out < <(sha256sum -- "$@")
  for line in "${out[@]}"; do SHAS+=("${line%% *}"); done
}

declare -gA KEY_IDS=()  # key file -> its public id (16 hex of the sha256 of its bytes)

# sign_record step version [field=value ...]: append one signed record to $OUT/records.log.
sign_record() {
  local log="$OUT/records.log" step=$1 version=$2 n=0 prev key keyid body f esc='' i recs=() mac
  shift 2
  prev=0000000000000000000000000000000000000000000000000000000000000000
  if [[ -s $log ]]; then
    mapfile -t recs <"$log"
    for f in "${recs[@]}"; do [[ -n $f ]] && { n=$((n + 1)); body=$f; }; done
    if ((n)); then prev=$(printf '%s' "$body" | sha256sum); prev=${prev%% *}; fi
  fi
  IFS= read -r key <"$KERNEL_LOOP_RECORD_KEY"
  keyid=${KEY_IDS[$KERNEL_LOOP_RECORD_KEY:$key]:-}
  if [[ -z $keyid ]]; then
    for ((i = 0; i < 64; i += 2)); do esc+="\\x${key:i:2}"; done
    # shellcheck disable=SC2059  # the format is the key as \xHH escapes
    keyid=$(printf "$esc" | sha256sum); keyid=${keyid:0:16}
    KEY_IDS[$KERNEL_LOOP_RECORD_KEY:$key]=$keyid
  fi
  body="rec=1"$'\t'"seq=$((n + 1))"$'\t'"prev=$prev"$'\t'"step=$step"$'\t'"version=$version"$'\t'"time=2025-01-01T00:00:00+0000"
  for f in "$@"; do body+=$'\t'"$f"; done
  body+=$'\t'"keyid=$keyid"
  mac=$(printf '%s' "$body" | openssl dgst -sha256 -mac HMAC -macopt "hexkey:$key" -r)
  printf '%s\tmac=%s\n' "$body" "${mac%% *}" >>"$log"
}

# The hashes every measurement record carries.
run_fields() { shas "$OUT/ref.py" "$OUT/run.json"; printf 'ref=%s\nrun=%s\n' "${SHAS[0]}" "${SHAS[1]}"; }

# init's record (make_run calls it).
sign_init() {
  local fields
  mapfile -t fields < <(run_fields)
  sign_record init - "iterations=${RUN_ITERATIONS:-3}" device=cuda:0 "gpu=NVIDIA H200" "${fields[@]}" files=
}

# The gate, as "run" sees it: gate <args...>
gate() { "$GATE" "$@"; }

# run.json; RUN_ITERATIONS set in a test adds the planned final version ("iterations")
write_run_json() {
  printf '{"schema": 1, "kernel": "softmax", "kernel_type": "softmax", "impl": "triton", "dims": {"M": 4096, "N": 8192}, "seed": %s%s}\n' \
    "${1:-42}" "${RUN_ITERATIONS:+, \"iterations\": $RUN_ITERATIONS}" >"$OUT/run.json"
}

# cached NAME FUNCTION [ARG...]: FUNCTION's run directory and key, built once per .bats file.  The first
# call in a file runs FUNCTION and keeps a copy of "$OUT" and of the record key under $BATS_FILE_TMPDIR;
# later calls copy them back.  Only into an empty "$OUT": a test that builds over a run it already has
# (make_run twice in one folder appends to records.log) gets the real build.  The name holds every
# variable the build reads, so that two variants never share a copy.
cached() {
  local name="$1-${RUN_ITERATIONS:-}-${DEVICE:-}" keep
  shift
  keep="$BATS_FILE_TMPDIR/fixture $name"
  if [[ -n $(find "$OUT" -mindepth 1 -print -quit) ]]; then
    "$@"
  elif [[ -d $keep ]]; then
    cp -a "$keep/run/." "$OUT/" && cp "$keep/key" "$KERNEL_LOOP_RECORD_KEY"
  else
    "$@" || return 1
    mkdir -p "$keep/run" && cp -a "$OUT/." "$keep/run/" && cp "$KERNEL_LOOP_RECORD_KEY" "$keep/key"
  fi
}

# A valid run directory with v0 only (no current_iteration.txt yet).
make_run() { cached make_run build_run; }

build_run() {
  write_run_json
  printf 'def reference(x):\n    return x.softmax(-1)\n' >"$OUT/ref.py"
  sign_init
  make_version 0
}

kernel_text() {
  cat <<EOF
import triton
import triton.language as tl

BLOCK = $((64 * ($1 + 1)))  # version $1


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=-float("inf"))
    e = tl.exp(x - tl.max(x, 0))
    tl.store(y_ptr + offs, e / tl.sum(e, 0), mask=offs < n)
EOF
}

write_hypothesis() {
  cat >"$1/hypothesis.txt" <<EOF
Version:
${1##*/}
Current evidence:
dram_throughput_pct = 41.5, achieved_occupancy_pct = 30.2, bottleneck = latency-bound
stall_long_scoreboard = 12.4 (symptom: long-scoreboard)
Decision link:
Long-scoreboard stalls at low occupancy; triton-block-size says larger tiles keep more loads in flight.
Single change:
Double BLOCK in kernel.py.
Rationale:
Each program then issues twice the loads before waiting, hiding DRAM latency.
Expected metric movement:
duration: -20%
dram_throughput_pct: +15
registers_per_thread: <= 64
Risk:
Register use grows with the tile and may lower occupancy.
Evidence used:
- triton-block-size
- gpu-latency-hiding
Decision rule:
Keep the change if correctness passes and duration drops at least 10%; otherwise revert it.
EOF
}

write_kbs_evidence() {
  cat >"$1/kbs_evidence.md" <<EOF
# KBS Evidence - ${1##*/}

## NCU Facts
- dram_throughput_pct = 41.5
- stall_long_scoreboard = 12.4, bottleneck latency-bound

## Queries
- kernel: "triton softmax" -> triton-block-size
- bottleneck: "latency-bound long scoreboard" -> gpu-latency-hiding

## Selected Evidence
- triton-block-size: larger BLOCK raises bytes in flight per program.

## Rejected / Limits
- cuda-async-copy: needs a rewrite larger than one step.

## Decision Link
Long-scoreboard stalls -> triton-block-size -> double BLOCK.
EOF
}

# Sign vK's correctness (PASS), profile and kbs records, as the helpers do; DEVICE overrides cuda:0.
measure() {
  local d="$OUT/v$1" v="v$1" s
  kernel_name "$1" >/dev/null
  shas "$OUT/ref.py" "$OUT/run.json" "$d/$KERNEL_NAME" "$d/correctness.md" "$d/correctness.json" "$d/ncu.json" \
    "$d/ncu_summary.md" "$d/ncu_details.md"
  s=("${SHAS[@]}")
  sign_record correctness "$v" result=PASS "device=${DEVICE:-cuda:0}" "gpu=NVIDIA H200" "kernel=${s[2]}" "ref=${s[0]}" \
    "run=${s[1]}" "files=correctness.md:${s[3]},correctness.json:${s[4]}"
  sign_record profile "$v" result=ok "device=${DEVICE:-cuda:0}" "gpu=NVIDIA H200" "kernel=${s[2]}" "ref=${s[0]}" \
    "run=${s[1]}" "files=ncu.json:${s[5]},ncu_summary.md:${s[6]},ncu_details.md:${s[7]}"
  sign_kbs "$1"
}

# Sign vK's kbs record: kbs_queries.jsonl as it is now and the ids its lines returned.
sign_kbs() {
  local d="$OUT/v$1" hits
  hits=$(grep -o '"hits": *\[[^]]*\]' "$d/kbs_queries.jsonl" | grep -o '"[a-z0-9-]*"' | grep -v '"hits"' | tr -d '"' | awk '!seen[$0]++' | paste -sd, -)
  sign_record kbs "v$1" "files=kbs_queries.jsonl:$(sha "$d/kbs_queries.jsonl")" "hits=$hits"
}

# The kernel file name of vK on stdout, also left in KERNEL_NAME.
kernel_name() {
  local f
  KERNEL_NAME=kernel.py
  for f in "$OUT/v$1"/*.py "$OUT/v$1"/*.cu; do
    [[ -f $f && ${f##*/} != ref.py ]] && { KERNEL_NAME=${f##*/}; break; }
  done
  printf '%s' "$KERNEL_NAME"
}

# make_version K: a complete, measured vK.
make_version() {
  local d="$OUT/v$1"
  mkdir -p "$d"
  kernel_text "$1" >"$d/kernel.py"
  printf '# Correctness - v%s\n\n| field | value |\n|---|---|\n| Result | PASS |\n| max_abs_err | 3.1e-07 |\n' "$1" >"$d/correctness.md"
  printf '# NCU summary - v%s\n\nduration_us = %s\nbottleneck: latency-bound\n' "$1" "$((90 - 10 * $1))" >"$d/ncu_summary.md"
  printf '# NCU details - v%s\n\n| metric | value |\n|---|---|\n| dram_throughput_pct | 41.5 |\n' "$1" >"$d/ncu_details.md"
  printf '{"schema": 1, "version": "v%s", "result": "PASS"}\n' "$1" >"$d/correctness.json"
  printf '{"schema": 1, "version": "v%s", "metrics": {"duration_us": %s}}\n' "$1" "$((90 - 10 * $1))" >"$d/ncu.json"
  write_kbs_evidence "$d"
  write_hypothesis "$d"
  printf '%s\n' '{"purpose": "kernel", "query": "triton softmax", "filters": {}, "hits": ["triton-block-size"], "time": "2025-01-01T00:00:00"}' \
    '{"purpose": "bottleneck", "query": "latency-bound", "filters": {}, "hits": ["gpu-latency-hiding"], "time": "2025-01-01T00:00:01"}' >"$d/kbs_queries.jsonl"
  measure "$1"
}

# advance_to N: v0..vN exist and the gates of v0..v(N-1) have passed.
advance_to() { cached "advance_to-$1" build_advanced "$1"; }

build_advanced() {
  local k
  make_run
  for ((k = 0; k < $1; k++)); do
    "$GATE" "$OUT/v$k" >/dev/null || return 1
    make_version $((k + 1))
  done
}

state() { cat "$OUT/current_iteration.txt"; }

# Assert the gate failed (exit 1) with exactly one [FAIL] line, containing $1.
# shellcheck disable=SC2154  # status and output are set by bats' run
assert_only_failure() {
  assert_equal "$status" 1
  local fails
  fails=$(grep -c '^\[FAIL\]' <<<"$output")
  assert_equal "$fails" 1
  assert_line --partial "$1"
  assert_line --regexp '^gate: v[0-9]+ FAILED: 1 check$'
}

# Fill the TODO(kernel-loop) markers of an extracted template with realistic
# text chosen by the heading they sit under.
fill_template() {
  awk '
    BEGIN {
      F["Version:"] = "v0"
      F["Current evidence:"] = "dram_throughput_pct = 38.0, bottleneck = memory-bound"
      F["Decision link:"] = "Uncoalesced loads waste DRAM bandwidth; see coalescing-basics."
      F["Single change:"] = "Load rows with contiguous offsets instead of strided ones."
      F["Rationale:"] = "Contiguous lanes merge into full 32-byte sectors."
      F["Expected metric movement:"] = "duration: -25%\nsectors_per_request_ld: <= 4"
      F["Risk:"] = "Tail rows need a mask; a wrong mask corrupts the last row."
      F["Evidence used:"] = "- triton-block-size"
      F["Decision rule:"] = "Keep it if correctness passes and duration drops 10% or more."
      F["TITLE"] = "v0"
      F["## NCU Facts"] = "- sectors_per_request_ld = 16.0"
      F["## Queries"] = "- kernel: \"softmax triton\" -> coalescing-basics"
      F["## Selected Evidence"] = "- coalescing-basics: contiguous lanes cut sectors per request."
      F["## Rejected / Limits"] = "- tma-loads: Hopper-only rewrite, too large for one step."
      F["## Decision Link"] = "16 sectors per request -> coalescing-basics -> contiguous loads."
    }
    { line = $0; sub(/[ \t]+$/, "", line) }
    line in F { cur = line }
    /^# KBS Evidence/ { sub(/TODO\(kernel-loop\)/, F["TITLE"]); print; next }
    /TODO\(kernel-loop\)/ { gsub(/TODO\(kernel-loop\)/, F[cur]) }
    { print }' "$1"
}

# Print the first fenced block of file $1 opened by the fence line $2.
fenced_block() {
  awk -v open="$2" '$0 == open && !f { f = 1; next } f && /^```[ \t]*$/ { exit } f' "$1"
}
