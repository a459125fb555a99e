#!/usr/bin/env bash
# Usage: check_iteration_gate.sh <out>/vK [--structural] [--verbose]
#        check_iteration_gate.sh <out>/vN --final [--structural] [--verbose]
#
# The iteration gate of kernel-loop: checks that version vK is complete and
# measured before the loop moves on, and is the only writer of
# <out>/current_iteration.txt.  Run with --help for the checks and exit codes.
set -u
shopt -s nullglob
unset CDPATH  # an exported CDPATH would make cd resolve <out>/vK elsewhere

readonly PROG=check_iteration_gate
readonly HYP_HEADINGS='Version:|Current evidence:|Decision link:|Single change:|Rationale:|Expected metric movement:|Risk:|Evidence used:|Decision rule:'
readonly KBS_HEADINGS='# KBS Evidence|## NCU Facts|## Queries|## Selected Evidence|## Rejected / Limits|## Decision Link'
readonly TODO_MARK='TODO(kernel-loop)'

usage() {
  cat <<'EOF'
Usage: check_iteration_gate.sh <out>/vK [--structural] [--verbose]
       check_iteration_gate.sh <out>/vN --final [--structural] [--verbose]
       check_iteration_gate.sh --help

The iteration gate of kernel-loop. Transition mode (the default) checks that
version vK is complete and measured, then advances <out>/current_iteration.txt
to v(K+1). --final audits every version v0..vN at the end of the run and never
writes the state. The run directory <out> is the parent of vK; paths may be
relative or absolute, contain spaces, and end in a slash.  "kernel-loop gate
<out>/vK [options]" runs this same script from an installed package.

Options:
  --final       final audit of v0..vN: every version must pass its checks and
                current_iteration.txt must name vN; nothing is written
  --structural  run only the structural checks 1-7 (files, headings, kernel,
                state, drift); skips the content checks 8-12.  Read-only: it
                never writes current_iteration.txt, not even the first v0 state
                (kernel-loop status uses it to ask where the run stands)
  --verbose     also print a [PASS] line for every check that passed
  -h, --help    print this help and exit 0

Checks (each failure prints one "[FAIL] vK: ..." line saying what to fix):
  1  correctness.md, ncu_summary.md, ncu_details.md, kbs_evidence.md exist and
     are non-empty.
  2  hypothesis.txt exists with these headings in order, each alone on its
     line: Version:, Current evidence:, Decision link:, Single change:,
     Rationale:, Expected metric movement:, Risk:, Evidence used:,
     Decision rule:.  Transition: required for vK. Final: required for
     v0..vN-1; checked for vN only when present.
  3  kbs_evidence.md has, in order: a line starting "# KBS Evidence", then
     "## NCU Facts", "## Queries", "## Selected Evidence",
     "## Rejected / Limits", "## Decision Link" (lines inside ``` fences are
     ignored).
  4  exactly one kernel file: kernel.py or kernel.cu (not both), else the one
     .py/.cu file other than ref.py; non-empty, not a symbolic link; for
     K > 0 its bytes differ from the previous version's kernel.  A version
     directory that is a symbolic link fails too.
  5  state: current_iteration.txt must name vK (transition) or vN (final).
     The final version N is finish.json's "version" when the run finished
     early (kernel-loop finish), else run.json's "iterations": the
     transition gate refuses vN, and --final refuses any other version.
     The first v0 transition gate creates it with "v0" when it is absent;
     with --structural an absent state passes for v0 and nothing is created.
  6  drift: every version folder beyond the recorded one is empty: any file
     in it (a kernel, notes, ref.py, hidden files, subfolders) fails; an
     empty future folder is fine.
  7  transition mode writes v(K+1) only when every check passed; final mode
     audits v0..vN and never writes; --structural never writes.
  8  correctness.md records a passing result: a "Result" line or table row
     whose value is PASS or ALL PASS ("| Result | **PASS** |", "Result: PASS").
     Every Result line present must pass; lines inside ``` or ~~~ fences
     and indented code blocks (4 spaces or a tab) are ignored.
  9  no TODO(kernel-loop) left in kbs_evidence.md or hypothesis.txt; every
     hypothesis heading and every "##" section of kbs_evidence.md has a
     non-blank line before the next heading.
  10 the kernel differs from the previous version beyond whitespace and
     comments. Approximation: .py drops everything from "#" to the end of the
     line and all whitespace except indentation; .cu drops "//" to the end of
     the line, "/* ... */" blocks and all whitespace. Comment markers inside
     string literals are treated as comments too; docstrings count as code.
  11 provenance: vK/measured.sha256 (sha256sum format, paths relative to vK)
     lists the kernel file, correctness.md, ncu_summary.md, ncu_details.md
     and ../run.json; no path is absolute or leaves <out> (../run.json is
     fine, ../../x is not); every listed file still has its recorded hash; the
     ../run.json hash equals the one v0 recorded (final: for every version).
  12 vK/kbs_queries.jsonl has a "purpose": "kernel" line and a
     "purpose": "bottleneck" line.
  The gate holds flock(1) on <out>/.gate.lock while it checks and writes
  (wait limit GATE_LOCK_TIMEOUT seconds, default 120) and writes the state
  through a temporary file in <out> and mv, so concurrent gates are safe.
  --structural takes the lock shared, and only when the lock file exists: it
  creates and writes nothing, so it also runs on a read-only run directory.

Re-running a passed gate: when current_iteration.txt already names v(K+1),
the transition gate re-checks vK (drift is then judged beyond v(K+1)); if
every check passes it exits 0 with a note and writes nothing, so a resumed
agent may re-run it safely. Any other mismatch between vK and the state fails.

Output: [FAIL]/[PASS] lines and a one-line summary on stdout, e.g.
  gate: v1 passed (transition); current_iteration.txt -> v2
  gate: v1 passed (structural checks, transition); current_iteration.txt not written
  gate: v1 FAILED: 2 checks
Usage errors go to stderr.

Exit codes:
  0  every check passed (transition: the state now names v(K+1);
     --structural and --final: nothing was written)
  1  at least one check failed: the state is not changed (except that the
     first v0 transition gate has created it with v0; --structural never
     creates it), or the lock could not be taken
  2  usage error: no or extra argument, unknown option, a path that is not a
     directory, a directory name that is not v<number> (v0, v1, ...; no
     leading zeros), or <out> not writable for the lock file (not checked
     with --structural)
EOF
}

usage_error() {
  printf '%s: %s\n' "$PROG" "$1" >&2
  printf "Run '%s --help' for usage.\n" "${0##*/}" >&2
  exit 2
}

# --- reporting ------------------------------------------------------------------
FAILS=0
VERBOSE=0
fail() { FAILS=$((FAILS + 1)); printf '[FAIL] %s\n' "$1"; }
pass() { if ((VERBOSE)); then printf '[PASS] %s\n' "$1"; fi; return 0; }

# --- small helpers ----------------------------------------------------------------
# sha256 of a file's bytes (read from stdin so odd names are not escaped).
digest() {
  local line
  line=$(sha256sum <"$1") || return 1
  printf '%s' "${line%% *}"
}

nonempty() { [[ -f $1 && -s $1 ]]; }

# Sets KERNEL to the basename of vdir's kernel file, or KERNEL_ERR to why not.
find_kernel() {
  local d=$1 f cand='' n=0
  KERNEL='' KERNEL_ERR=''
  if [[ -f $d/kernel.py && -f $d/kernel.cu ]]; then
    KERNEL_ERR='holds both kernel.py and kernel.cu: keep exactly one kernel file'
    return 1
  fi
  for f in kernel.py kernel.cu; do
    if [[ -f $d/$f ]]; then KERNEL=$f; return 0; fi
  done
  for f in "$d"/*.py "$d"/*.cu; do
    [[ -f $f && ${f##*/} != ref.py ]] || continue
    n=$((n + 1)); cand=${f##*/}
  done
  if ((n == 1)); then KERNEL=$cand; return 0; fi
  KERNEL_ERR="needs exactly one kernel file (kernel.py or kernel.cu); found $n .py/.cu files besides ref.py"
  return 1
}

# The kernel text with comments and insignificant whitespace removed (check 10).
normalise_kernel() {
  case $1 in
    *.py)
      awk '{
        sub(/\r$/, ""); sub(/#.*/, "")
        match($0, /^[ \t]*/); lead = substr($0, 1, RLENGTH); rest = substr($0, RLENGTH + 1)
        gsub(/[ \t]+/, "", rest)
        if (rest != "") print lead rest
      }' "$1"
      ;;
    *)
      awk '{ buf = buf $0 "\n" }
      END {
        out = ""
        while (1) {
          b = index(buf, "/*"); l = index(buf, "//")
          if (b == 0 && l == 0) { out = out buf; break }
          if (b != 0 && (l == 0 || b < l)) {
            out = out substr(buf, 1, b - 1) " "; rest = substr(buf, b + 2); e = index(rest, "*/")
            buf = (e == 0) ? "" : substr(rest, e + 2)
          } else {
            out = out substr(buf, 1, l - 1); rest = substr(buf, l + 2); e = index(rest, "\n")
            buf = (e == 0) ? "" : substr(rest, e)
          }
        }
        gsub(/[ \t\r\n\f\v]+/, "", out); printf "%s", out
      }' "$1"
      ;;
  esac
}

# Print the first expected heading that is missing or out of order (empty: all found).
# $1: headings separated by "|"; $2: 1 for markdown (first heading is a prefix, fences skipped).
first_missing_heading() {
  awk -v hs="$1" -v md="$2" '
    BEGIN { n = split(hs, H, "|"); i = 1 }
    { sub(/\r$/, ""); t = $0; sub(/[ \t]+$/, "", t)
      if (md && t ~ /^```/) { fence = !fence; next }
      if (fence || i > n) next
      if (t == H[i] || (md && i == 1 && index(t, H[1]) == 1)) i++ }
    END { if (i <= n) print H[i] }' "$3"
}

# Print every heading/section whose body has no non-blank line (check 9).
empty_sections() {
  awk -v hs="$1" -v md="$2" '
    BEGIN { n = split(hs, H, "|"); for (j = 1; j <= n; j++) isH[H[j]] = 1 }
    { sub(/\r$/, ""); t = $0; sub(/[ \t]+$/, "", t)
      if (md && t ~ /^```/) { fence = !fence; body = 1; next }
      head = md ? (!fence && t ~ /^##?[ \t]/) : (t in isH)
      if (head) { if (cur != "" && !body) print cur; cur = (md && t ~ /^# /) ? "" : t; body = 0; next }
      if (t ~ /[^ \t]/) body = 1 }
    END { if (cur != "" && !body) print cur }' "$3"
}

# Parse vdir/measured.sha256 into M_PATH[]/M_HASH[]; M_BAD counts malformed lines.
parse_manifest() {
  local line re='^\\?([0-9a-fA-F]{64}) [ *](.+)$' p
  M_PATH=() M_HASH=() M_BAD=0
  [[ -f $1/measured.sha256 ]] || return 1
  while IFS= read -r line || [[ -n $line ]]; do
    line=${line%$'\r'}
    [[ -n ${line//[[:space:]]/} ]] || continue
    if [[ $line =~ $re ]]; then
      p=${BASH_REMATCH[2]}
      M_PATH+=("${p#./}"); M_HASH+=("${BASH_REMATCH[1],,}")
    else
      M_BAD=$((M_BAD + 1))
    fi
  done <"$1/measured.sha256"
  return 0
}

# The hash vdir recorded for path $2, or nothing.
recorded_hash() {
  local i
  parse_manifest "$1" || return 1
  for i in "${!M_PATH[@]}"; do
    if [[ ${M_PATH[$i]} == "$2" ]]; then printf '%s' "${M_HASH[$i]}"; return 0; fi
  done
  return 1
}

# --- per-version checks (1-4, 8-12) -------------------------------------------------
# One function per numbered check; tests/gate/<file>.bats covers each (named above it).
# begin_version sets, for the version check_version is checking:
#   V (its name, "vK"), D (its folder), VK (K), NEED_HYP (1: hypothesis.txt required)
# and the checks pass these results on to the content checks:
#   HYP_OK, KBS_OK    check 2 / 3 found every heading in order (check 9 then reads the bodies)
#   KERNEL, KERNEL_OK check 4 found the one kernel file (check 11 needs it listed)
#   PREV_KERNEL       check 4: the previous version's kernel, set when the bytes differ (check 10)

# $1: version number; $2: 1 when hypothesis.txt is required.  Fails and returns 1 when the
# version folder is missing (final audit) or is a symbolic link (check 4).
begin_version() {
  VK=$1 NEED_HYP=$2 V="v$1" D="$OUT/v$1"
  HYP_OK=0 KBS_OK=0 KERNEL='' KERNEL_OK=0 PREV_KERNEL=''
  if [[ ! -d $D ]]; then
    fail "$V: the folder $V is missing: every version v0..v$N must exist for the final audit"
    return 1
  fi
  if [[ -L $D ]]; then
    fail "$V: $V is a symbolic link: each version must be a real directory inside the run directory"
    return 1
  fi
}

# 1. measured and written files (files.bats)
check_1_files() {
  local f missing=()
  for f in correctness.md ncu_summary.md ncu_details.md kbs_evidence.md; do
    nonempty "$D/$f" || missing+=("$f")
  done
  if ((${#missing[@]})); then
    fail "$V: missing or empty: ${missing[*]} (correctness.md: kernel-loop correctness; ncu_*: kernel-loop profile; kbs_evidence.md: kernel-loop kbs, then fill it in)"
  else
    pass "$V: correctness.md, ncu_summary.md, ncu_details.md, kbs_evidence.md present"
  fi
}

# Checks 2 and 3: $1's headings $2 ("|"-separated) in order ($3: 1 for markdown); on a miss the
# [FAIL] line is the printf format $4 with the missing heading, else the [PASS] line $5.
headings_in_order() {
  local hits
  hits=$(first_missing_heading "$2" "$3" "$1")
  if [[ -n $hits ]]; then
    # shellcheck disable=SC2059  # $4 is this script's own format string
    fail "$V: $(printf "$4" "$hits")"
    return 1
  fi
  pass "$V: $5"
}

# 2. hypothesis headings (hypothesis.bats)
check_2_hypothesis_headings() {
  local hyp="$D/hypothesis.txt"
  ((NEED_HYP)) || [[ -e $hyp ]] || return 0
  if ! nonempty "$hyp"; then
    fail "$V: hypothesis.txt is missing or empty: write the single next change (kernel-loop hypothesis drafts it; format in references/hypothesis.md)"
    return
  fi
  headings_in_order "$hyp" "$HYP_HEADINGS" 0 \
    "hypothesis.txt lacks the heading '%s' (missing, out of order, or not alone on its line); headings in order: ${HYP_HEADINGS//|/ }" \
    "hypothesis.txt has every heading in order" && HYP_OK=1
  return 0
}

# 3. kbs_evidence.md headings (kbs.bats)
check_3_kbs_headings() {
  local kbs="$D/kbs_evidence.md"
  nonempty "$kbs" || return 0
  headings_in_order "$kbs" "$KBS_HEADINGS" 1 \
    "kbs_evidence.md lacks '%s' (missing or out of order); sections in order: # KBS Evidence, ## NCU Facts, ## Queries, ## Selected Evidence, ## Rejected / Limits, ## Decision Link" \
    "kbs_evidence.md has every section in order" && KBS_OK=1
  return 0
}

# 4. exactly one kernel, non-empty, bytes differ from the previous version (kernel.bats)
check_4_kernel() {
  local kname prev="$OUT/v$((VK - 1))"
  if ! find_kernel "$D"; then
    fail "$V: $KERNEL_ERR"
  elif [[ -L $D/$KERNEL ]]; then
    fail "$V: $KERNEL is a symbolic link: copy the kernel into $V so the version keeps its own source"
  elif [[ ! -s $D/$KERNEL ]]; then
    fail "$V: $KERNEL is empty"
  elif ((VK > 0)); then
    kname=$KERNEL
    if ! find_kernel "$prev"; then
      fail "$V: cannot compare with v$((VK - 1)): v$((VK - 1)) has no single kernel file"
    elif [[ $(digest "$D/$kname") == "$(digest "$prev/$KERNEL")" ]]; then
      fail "$V: $kname is byte-identical to v$((VK - 1))/$KERNEL: make the single change from hypothesis.txt of v$((VK - 1))"
    else
      pass "$V: $kname present and differs from v$((VK - 1))/$KERNEL"; PREV_KERNEL="$prev/$KERNEL"
    fi
    KERNEL=$kname KERNEL_OK=1
  else
    pass "$V: $KERNEL present"; KERNEL_OK=1
  fi
}

# 8. correctness passed (correctness.bats)
check_8_correctness() {
  local bad
  nonempty "$D/correctness.md" || return 0
  bad=$(awk '
    { line = $0; sub(/\r$/, "", line)
      if (line ~ /^ ? ? ?(```|~~~)/) { fence = !fence; next }
      if (fence || line ~ /^(    |\t)/) next
      gsub(/\*\*|__|`/, "", line)
      if (line ~ /^[ \t]*\|[ \t]*[Rr]esult[ \t]*\|/) {
        sub(/^[ \t]*\|[ \t]*[Rr]esult[ \t]*\|[ \t]*/, "", line); sub(/[ \t]*\|.*$/, "", line)
      } else if (line ~ /^[ \t]*([-*][ \t]+)?[Rr]esult[ \t]*:/) {
        sub(/^[ \t]*([-*][ \t]+)?[Rr]esult[ \t]*:[ \t]*/, "", line); sub(/[ \t]+$/, "", line)
      } else next
      seen = 1
      if (line != "PASS" && line != "ALL PASS" && bad == "") bad = (line == "" ? "(empty)" : line) }
    END { if (!seen) print "no Result line"; else if (bad != "") print "Result is " bad }' "$D/correctness.md")
  if [[ -n $bad ]]; then
    fail "$V: correctness has not passed ($bad in correctness.md): fix the kernel and re-run kernel-loop correctness"
  else
    pass "$V: correctness.md records PASS"
  fi
}

# 9. templates filled in (templates.bats; hypothesis.bats and kbs.bats test each file's half)
check_9_templates_filled() {
  local f hits
  for f in kbs_evidence.md hypothesis.txt; do
    [[ -f $D/$f ]] || continue
    hits=$(grep -nF -- "$TODO_MARK" "$D/$f" | cut -d: -f1 | tr '\n' ' ')
    if [[ -n $hits ]]; then
      fail "$V: $f still has $TODO_MARK on line(s) ${hits% }: replace each with real content"
    else
      pass "$V: $f has no $TODO_MARK"
    fi
  done
  if ((HYP_OK)); then
    hits=$(empty_sections "$HYP_HEADINGS" 0 "$D/hypothesis.txt" | tr '\n' ' ')
    if [[ -n $hits ]]; then fail "$V: hypothesis.txt has empty heading(s): ${hits% } (write at least one line under each)"
    else pass "$V: every hypothesis.txt heading has content"; fi
  fi
  if ((KBS_OK)); then
    hits=$(empty_sections '' 1 "$D/kbs_evidence.md" | awk '{ printf "%s\"%s\"", sep, $0; sep = ", " }')
    if [[ -n $hits ]]; then fail "$V: kbs_evidence.md has empty section(s): $hits (write at least one line under each)"
    else pass "$V: every kbs_evidence.md section has content"; fi
  fi
}

# 10. change beyond whitespace and comments (kernel.bats)
check_10_kernel_change() {
  [[ -n $PREV_KERNEL ]] || return 0
  if [[ $(normalise_kernel "$D/$KERNEL" | sha256sum) == "$(normalise_kernel "$PREV_KERNEL" | sha256sum)" ]]; then
    fail "$V: $KERNEL differs from v$((VK - 1)) only in whitespace or comments: make a real code change"
  else
    pass "$V: $KERNEL changes code, not only whitespace or comments"
  fi
}

# 11. provenance (provenance.bats)
check_11_provenance() {
  if ! parse_manifest "$D"; then
    fail "$V: measured.sha256 is missing: run kernel-loop correctness and kernel-loop profile, which record what they measured"
    return
  fi
  local paths=("${M_PATH[@]}") hashes=("${M_HASH[@]}") i rel want have prov_fail=0
  local wanted=(correctness.md ncu_summary.md ncu_details.md ../run.json)
  ((KERNEL_OK)) && wanted=("$KERNEL" "${wanted[@]}")
  ((M_BAD)) && { fail "$V: measured.sha256 has $M_BAD malformed line(s): expected '<sha256>  <path>'"; prov_fail=1; }
  for want in "${wanted[@]}"; do
    have=0
    for rel in "${paths[@]}"; do [[ $rel == "$want" ]] && have=1; done
    if ((!have)); then
      fail "$V: measured.sha256 does not list $want: re-run $( [[ $want == ncu_* ]] && printf 'kernel-loop profile' || printf 'kernel-loop correctness and profiling')"
      prov_fail=1
    fi
  done
  for i in "${!paths[@]}"; do
    rel=${paths[$i]}
    if [[ $rel == /* || /${rel#../}/ == */../* ]]; then
      fail "$V: measured.sha256 lists '$rel', outside the run directory: paths must be relative to $V and stay inside <out>"; prov_fail=1
    elif [[ ! -f $D/$rel ]]; then
      fail "$V: $rel is listed in measured.sha256 but missing: re-run correctness and profiling"; prov_fail=1
    elif [[ $(digest "$D/$rel") != "${hashes[$i]}" ]]; then
      if [[ $rel == ../run.json ]]; then
        fail "$V: run configuration changed during the run: ../run.json changed after $V was measured (restore it or start a new run)"
      elif [[ $rel == ncu* ]]; then
        fail "$V: $rel changed after it was measured: re-run profiling"
      else
        fail "$V: $rel changed after it was measured: re-run correctness and profiling"
      fi
      prov_fail=1
    fi
  done
  if ((VK > 0)); then
    have=''
    for i in "${!paths[@]}"; do [[ ${paths[$i]} == ../run.json ]] && have=${hashes[$i]}; done
    want=$(recorded_hash "$OUT/v0" ../run.json)
    if [[ -z $want ]]; then
      fail "$V: run configuration cannot be compared: v0/measured.sha256 records no ../run.json"; prov_fail=1
    elif [[ -n $have && $have != "$want" ]]; then
      fail "$V: run configuration changed during the run: $V measured a different run.json than v0"; prov_fail=1
    fi
  fi
  ((prov_fail)) || pass "$V: measured.sha256 lists and matches every measured file"
}

# 12. KBS queries (kbs.bats)
check_12_kbs_queries() {
  local q="$D/kbs_queries.jsonl" purpose
  if [[ ! -f $q ]]; then
    fail "$V: kbs_queries.jsonl is missing: run kernel-loop kbs (it logs a kernel and a bottleneck query)"
    return
  fi
  for purpose in kernel bottleneck; do
    if grep -Eq "\"purpose\"[[:space:]]*:[[:space:]]*\"$purpose\"" "$q"; then
      pass "$V: kbs_queries.jsonl has a $purpose query"
    else
      fail "$V: kbs_queries.jsonl has no \"purpose\": \"$purpose\" query: run kernel-loop kbs"
    fi
  done
}

# Every per-version check, in order; --structural stops after check 4.
# $1: version number; $2: 1 when hypothesis.txt is required.
check_version() {
  begin_version "$1" "$2" || return 0
  check_1_files
  check_2_hypothesis_headings
  check_3_kbs_headings
  check_4_kernel
  ((STRUCTURAL)) && return 0
  check_8_correctness
  check_9_templates_filled
  check_10_kernel_change
  check_11_provenance
  check_12_kbs_queries
}

# --- run-level checks (5-7) -----------------------------------------------------------
# Sets STATE to the recorded version number, "" when absent, "?" when corrupt.
read_state() {
  local text=''
  STATE='' STATE_TEXT=''
  [[ -e $STATE_FILE ]] || return 0
  IFS= read -r text <"$STATE_FILE" || true
  text=${text%$'\r'}; text=${text#"${text%%[![:space:]]*}"}; text=${text%"${text##*[![:space:]]}"}
  STATE_TEXT=$text
  if [[ $text =~ ^v(0|[1-9][0-9]{0,8})$ ]]; then STATE=${BASH_REMATCH[1]}; else STATE='?'; fi
}

write_state() {
  local tmp
  tmp=$(mktemp "$OUT/.current_iteration.XXXXXX") || return 1
  if printf 'v%s\n' "$1" >"$tmp" && mv -f -- "$tmp" "$STATE_FILE"; then return 0; fi
  rm -f -- "$tmp"
  return 1
}

# The value of top-level key $2 of the JSON object in file $1: a number, or a string without its
# quotes (nothing when absent, nested, or neither).  Tracks strings and nesting, so a key of the same
# name inside another object ("dims": {"iterations": ...}) never counts.
json_top_value() {
  awk -v want="$2" '
    { text = text $0 "\n" }
    END {
      depth = 0; n = length(text); key = ""; expect = 0
      for (i = 1; i <= n; i++) {
        c = substr(text, i, 1)
        if (c == "\"") {
          s = ""; i++
          while (i <= n) { c = substr(text, i, 1); if (c == "\\") { s = s substr(text, i, 2); i += 2; continue }
                           if (c == "\"") break; s = s c; i++ }
          if (expect && depth == 1) { if (key == want) { print s; exit } expect = 0; key = ""; continue }
          if (depth == 1) key = s
          continue
        }
        if (c == "{" || c == "[") { depth++; expect = 0; continue }
        if (c == "}" || c == "]") { depth--; continue }
        if (c == ":" && depth == 1 && key != "") { expect = 1; continue }
        if (c == ",") { key = ""; expect = 0; continue }
        if (expect && depth == 1 && c ~ /[-0-9]/) {
          v = ""; while (i <= n && substr(text, i, 1) ~ /[-0-9.eE+]/) { v = v substr(text, i, 1); i++ }
          if (key == want) { print v; exit }
          expect = 0; key = ""; i--
        }
      }
    }' "$1" 2>/dev/null
}

# The run's final version N, when the run says: finish.json's top-level "version" (an early finish),
# else run.json's top-level "iterations" (the planned vN).  Sets FINAL_N ('' when neither says) and
# FINAL_WHY.
read_final_version() {
  local value=''
  FINAL_N='' FINAL_WHY=''
  if [[ -f $OUT/finish.json ]]; then
    value=$(json_top_value "$OUT/finish.json" version)
    if [[ $value =~ ^v(0|[1-9][0-9]{0,8})$ ]]; then FINAL_N=${BASH_REMATCH[1]} FINAL_WHY='finish.json: the run finished early'; fi
  fi
  if [[ -z $FINAL_N && -f $OUT/run.json ]]; then
    value=$(json_top_value "$OUT/run.json" iterations)
    if [[ $value =~ ^(0|[1-9][0-9]{0,8})$ ]]; then FINAL_N=$value FINAL_WHY='run.json iterations'; fi
  fi
}

# 5. the state names vK (transition) or vN (final) (state.bats).  Sets RERUN (the state
# already names v(K+1)), DRIFT_LIMIT (check 6 looks beyond it) and NOTE.  Only the first
# v0 transition gate writes here, and never in --structural mode.
check_5_state() {
  RERUN=0 DRIFT_LIMIT=$K NOTE=''
  read_final_version
  if [[ -n $FINAL_N ]] && ((FINAL && K != FINAL_N)); then
    fail "v$K is not the final version: the run's final version is v$FINAL_N ($FINAL_WHY); run the final audit on v$FINAL_N, or end the run at v$K with 'kernel-loop finish <out> --reason ...' first"
  elif [[ -n $FINAL_N ]] && ((!FINAL && K >= FINAL_N)); then
    fail "v$K is the final version ($FINAL_WHY): run the final audit instead: check_iteration_gate.sh <out>/v$K --final"
    return
  fi
  if ((FINAL)); then
    if [[ $STATE == "$K" ]]; then
      pass "current_iteration.txt names v$K"
    elif [[ -z $STATE ]] && ((K == 0)); then
      pass "v0 is the final version ($FINAL_WHY): no transition gate comes before it"
    elif [[ -z $STATE ]]; then
      fail "current_iteration.txt is missing: the final audit needs every transition gate v0..v$((K - 1)) passed first"
    else
      fail "current_iteration.txt names '$STATE_TEXT', not v$K: the final audit runs on the recorded version"
    fi
    return
  fi
  if [[ -z $STATE && $K == 0 ]]; then
    if ((STRUCTURAL)); then
      pass "current_iteration.txt is absent: the first v0 transition gate creates it (--structural writes nothing)"
      return
    fi
    if write_state 0; then NOTE='created current_iteration.txt with v0'; STATE=0
    else fail "cannot write $STATE_FILE"; fi
  fi
  if [[ $STATE == "$K" ]]; then
    pass "current_iteration.txt names v$K"
  elif [[ $STATE == "$((K + 1))" ]]; then
    RERUN=1 DRIFT_LIMIT=$((K + 1))
    pass "current_iteration.txt already names v$((K + 1)); re-checking v$K without writing"
  elif [[ -z $STATE ]]; then
    fail "current_iteration.txt is missing: run the gate on v0 first (only the first v0 gate creates it)"
  elif [[ $STATE == '?' ]]; then
    fail "current_iteration.txt holds '${STATE_TEXT:0:40}', not a version name: the state is corrupt; write the version being worked on (v0, v1, ...) into it"
  elif ((STATE < K)); then
    fail "current_iteration.txt names v$STATE: v$STATE has not passed its gate yet; gate v$STATE first"
  else
    fail "current_iteration.txt names v$STATE, so v$K was passed earlier: gate v$STATE instead"
  fi
  [[ $STATE == '?' || -z $STATE ]] || ((STATE <= K + 1)) || DRIFT_LIMIT=$STATE
}

# 6. drift: every version folder beyond version $1 is empty (state.bats)
check_6_drift() {
  local limit=$1 dir name f found
  for dir in "$OUT"/v*/; do
    name=${dir%/}; name=${name##*/}
    [[ $name =~ ^v(0|[1-9][0-9]{0,8})$ ]] || continue
    ((BASH_REMATCH[1] > limit)) || continue
    found=()
    for f in "$dir"* "$dir".[!.]* "$dir"..?*; do
      [[ -e $f || -L $f ]] && found+=("${f##*/}")
    done
    if ((${#found[@]})); then
      fail "state drift: $name holds ${found[*]} but current_iteration.txt is at v$limit: gate the versions in order, or move $name's files aside"
      return
    fi
  done
  pass "no artifacts beyond v$limit"
}

# 7. the summary; transition mode writes v(K+1) only when every check passed, final and
# --structural modes never write (state.bats, sequence.bats).  Exits.
check_7_advance_state() {
  [[ -n $NOTE ]] && printf 'note: %s\n' "$NOTE"
  if ((FAILS)); then
    printf 'gate: v%s FAILED: %d check%s\n' "$K" "$FAILS" "$([[ $FAILS == 1 ]] || printf s)"
    exit 1
  fi
  if ((FINAL && STRUCTURAL)); then
    printf 'gate: v%s passed (structural checks, final audit of v0..v%s)\n' "$K" "$K"
  elif ((FINAL)); then
    printf 'gate: v%s passed (final audit of v0..v%s)\n' "$K" "$K"
  elif ((STRUCTURAL)); then
    printf 'gate: v%s passed (structural checks, transition); current_iteration.txt not written\n' "$K"
  elif ((RERUN)); then
    printf 'gate: v%s passed (transition, already recorded); current_iteration.txt stays v%s\n' "$K" "$((K + 1))"
  elif write_state $((K + 1)); then
    printf 'gate: v%s passed (transition); current_iteration.txt -> v%s\n' "$K" "$((K + 1))"
  else
    printf '%s: v%s passed but %s could not be written\n' "$PROG" "$K" "$STATE_FILE" >&2
    exit 1
  fi
  exit 0
}

# --- main -------------------------------------------------------------------------------
# Sets FINAL, STRUCTURAL, VERBOSE, K, OUT, STATE_FILE from the command line.
parse_args() {
  local arg target='' abs vname
  FINAL=0 STRUCTURAL=0
  for arg in "$@"; do
    case $arg in
      -h | --help) usage; exit 0 ;;
    esac
  done
  for arg in "$@"; do
    case $arg in
      --final) FINAL=1 ;;
      --structural) STRUCTURAL=1 ;;
      --verbose) VERBOSE=1 ;;
      -*) usage_error "unknown option '$arg'" ;;
      *) [[ -z $target ]] || usage_error "one version directory expected, got '$target' and '$arg'"
         target=$arg ;;
    esac
  done
  [[ -n $target ]] || usage_error "missing the version directory (<out>/vK)"
  [[ -d $target ]] || usage_error "'$target' is not a directory"
  abs=$(cd -- "$target" && pwd) || usage_error "cannot enter '$target'"
  vname=${abs##*/}
  [[ $vname =~ ^v(0|[1-9][0-9]{0,8})$ ]] ||
    usage_error "'$vname' is not a version directory name (v0, v1, ...; no leading zeros)"
  K=${BASH_REMATCH[1]} N=${BASH_REMATCH[1]}
  OUT=${abs%/*}; [[ -n $OUT ]] || OUT=/
  STATE_FILE="$OUT/current_iteration.txt"
}

# flock(1) on <out>/.gate.lock for the rest of the run (the descriptor stays open).
# --structural only reads: it takes the lock shared, and only when the lock file exists
# (every state write is an atomic rename, so a reader never sees half a state file).
take_lock() {
  local lockfd mode=-x
  if ((STRUCTURAL)); then
    [[ -e $OUT/.gate.lock ]] || return 0
    { exec {lockfd}<"$OUT/.gate.lock"; } 2>/dev/null || return 0
    mode=-s
  else
    { exec {lockfd}>>"$OUT/.gate.lock"; } 2>/dev/null || usage_error "cannot create the lock file $OUT/.gate.lock"
  fi
  if ! flock "$mode" -w "${GATE_LOCK_TIMEOUT:-120}" "$lockfd"; then
    printf '%s: another gate holds %s; gave up after %ss\n' "$PROG" "$OUT/.gate.lock" "${GATE_LOCK_TIMEOUT:-120}" >&2
    exit 1
  fi
}

main() {
  local j
  parse_args "$@"
  take_lock
  read_state
  check_5_state
  check_6_drift "$DRIFT_LIMIT"
  if ((FINAL)); then
    for ((j = 0; j <= K; j++)); do check_version "$j" $((j < K)); done
  else
    check_version "$K" 1
  fi
  check_7_advance_state
}

main "$@"
