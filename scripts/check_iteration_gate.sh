#!/usr/bin/env bash
# Usage: check_iteration_gate.sh <out>/vK [--structural | --dry-run] [--verbose]
#        check_iteration_gate.sh <out>/vN --final [--structural | --dry-run] [--verbose]
#
# The iteration gate of kernel-loop: checks that version vK is complete and
# measured before the loop moves on, and is the only writer of
# <out>/current_iteration.txt that moves the run forward.  Run with --help for
# the checks and exit codes.
set -u
shopt -s nullglob
unset CDPATH  # an exported CDPATH would make cd resolve <out>/vK elsewhere

readonly PROG=check_iteration_gate
readonly HYP_HEADINGS='Version:|Current evidence:|Decision link:|Single change:|Rationale:|Expected metric movement:|Risk:|Evidence used:|Decision rule:'
readonly KBS_HEADINGS='# KBS Evidence|## NCU Facts|## Queries|## Selected Evidence|## Rejected / Limits|## Decision Link'
readonly TODO_MARK='TODO(kernel-loop)'
readonly RECORDS=records.log
readonly ZERO_HASH=0000000000000000000000000000000000000000000000000000000000000000
declare -A R=()      # the records: R["<n>.<field>"], n = 1..REC_N (load_records)
declare -a REC_LINE=()
REC_N=0 REC_OK=0 REC_TAIL=''
PREFETCH=() PREFETCHED=0  # the files load_records hashed with the records (prefetch_paths)
NOTE=''              # a line for the summary (check 5)

# How to run the helpers, for hints that give a whole command: helpers/kloop.py of this skill folder
# when the gate runs from it, else the installed "kernel-loop".
kloop_command() {
  local here
  dir_of "${BASH_SOURCE[0]}"
  here=$(cd -- "$DIR" 2>/dev/null && pwd) || here=''
  if [[ -n $here && -f $here/../helpers/kloop.py ]]; then
    printf 'python3 %q' "$(cd -- "$here/.." && pwd)/helpers/kloop.py"
  else
    printf 'kernel-loop'
  fi
}

# Sets DIR to what dirname(1) prints for path $1, without a process: the path without its last component
# and the slashes before it ("." when nothing is left, "/" for the root).
dir_of() {
  local p=$1 lead rest head base
  lead=${p%%[!/]*} rest=${p#"$lead"}
  rest=${rest%"${rest##*[!/]}"}
  if [[ $rest == */* ]]; then head=${rest%/*}; base=$((${#lead} + ${#head} + 1)); else base=${#lead}; fi
  DIR=${p:0:base}
  DIR=${DIR%"${DIR##*[!/]}"}
  if [[ -z $DIR ]]; then
    if [[ $p == /* ]]; then DIR=/; else DIR=.; fi
  fi
}

usage() {
  cat <<'EOF'
Usage: check_iteration_gate.sh <out>/vK [--structural | --dry-run] [--verbose]
       check_iteration_gate.sh <out>/vN --final [--structural | --dry-run] [--verbose]
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
                state, drift); skips the content checks 8-15.  Read-only: it
                never writes current_iteration.txt, not even the first v0 state
  --dry-run     run every check of the mode (1-15, signatures verified) but
                write nothing: no state, no gate record, no lock file (with
                --final only the lock differs; kernel-loop status uses it to
                ask where the run stands)
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
     .py/.cu file other than ref.py; its name only letters, digits, '.', '_'
     and '-'; no other source file beside it (.py .cu .cuh .h .hpp .cpp .cc
     .c .so .ptx .cubin; ref.py is fine); non-empty, not a symbolic link; for
     K > 0 its bytes differ from the previous version's kernel.  A version
     directory that is a symbolic link fails too.
  5  state: current_iteration.txt must name vK (transition) or vN (final).
     The final version N is the last signed finish record's version (kernel-
     loop finish) or extend record's iterations (kernel-loop extend), else
     run.json's "iterations"; a finish.json without a finish record fails: the
     transition gate refuses vN, and --final refuses any other version.
     The first v0 transition gate creates it with "v0" when it is absent;
     with --structural or --dry-run an absent state passes for v0 and nothing
     is created.  Once records.log holds a signed gate record, the state must
     name the version after the last one: a missing, corrupt or different
     state is the only [FAIL] (no other check runs), no gate writes a state
     behind that record, and "kernel-loop status <out> --restore-state"
     rebuilds the file from the signed gate records.  Any failure of this
     check is the only [FAIL]: the later checks would follow from it.
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
     hypothesis heading and every "##" section of kbs_evidence.md has real
     text before the next heading: at least 4 letters besides filler words
     (TBD, TBA, todo, n/a, none, fixme, xxx, placeholder, ...).
  10 the kernel differs from the previous version beyond whitespace and
     comments. Approximation: .py drops everything from "#" to the end of the
     line and all whitespace except indentation; .cu drops "//" to the end of
     the line, "/* ... */" blocks and all whitespace. Comment markers inside
     string literals are treated as comments too; docstrings count as code.
  11 provenance: records.log holds a signed correctness record of vK that
     says PASS and a signed profile record, each for the kernel as it is now,
     with init's ref.py and run.json, on the run's device (cuda:<gpu>; a
     CPU-mode result never counts for a GPU run), the last profile record
     says ok, and the files they wrote (correctness.md/.json, ncu.json,
     ncu_summary.md, ncu_details.md) unchanged since.
  12 vK/kbs_queries.jsonl: every line is a JSON object, there is a
     "purpose": "kernel" and a "purpose": "bottleneck" line, and the file is
     the one a signed kbs record names (kernel-loop kbs evidence, or
     kbs query --log).
  13 records.log: the record key is there (outside <out>), every line is the
     next link of the hash chain and its HMAC-SHA256 verifies; the first record
     is init's, and ref.py and run.json still have the hashes it recorded.
     Every other check trusts the records, so a failure here is the only
     [FAIL] the gate prints.
  14 hypothesis.txt: Version: names vK; at least one line under Expected
     metric movement: parses as a prediction ([<kernel>:]<metric>: <op><number>),
     and one is on duration (or event_median_us) without a kernel; each
     prediction could both fail and hold (every KEY is non-negative, a _pct
     KEY at most 100: 'duration: >= 0', 'duration: <= -5', 'x_pct: <= 100'
     and 'x_pct: +1e3' fail check 14); every
     id under Evidence used: is a page that vK's logged queries returned.
  15 frozen decisions: every version before vK (final: before vN) has exactly
     one signed gate record, so no version was skipped or re-gated, and its
     hypothesis.txt, kbs_evidence.md and kernel are unchanged since that gate
     passed.  With check 5, current_iteration.txt must name the version after
     the last gate record, and (check 11) each version's records must come
     after the previous version's gate record: a version measured before the
     previous decision was frozen fails.
  A transition that changes more than one launch or tuning value (num_warps,
  num_stages, BLOCK/TILE/WARPS/STAGES/THREADS names, grid, <<<...>>>, template
  arguments) prints a [WARN] line naming them; it never fails.  A kernel
  byte-identical to an earlier version's (a revert), or one defining fewer
  kernels than the previous version's (a fusion), prints an [INFO] line saying so
  instead.  A kbs_evidence.md of the gated version that cites as kbs:ID a page
  no query logged for that version returned prints a [WARN] line too.

  The record key is $KERNEL_LOOP_RECORD_KEY, else
  ${XDG_CONFIG_HOME:-~/.config}/kernel-loop/record.key; the format of
  records.log and the threat model are in references/artifacts.md.  A passed
  transition gate appends its own signed gate record before it writes the
  state.  --structural reads records.log without verifying it and skips
  checks 8-15.  --dry-run verifies it like a real run and writes nothing.
  The gate holds flock(1) on <out>/.gate.lock while it checks and writes
  (wait limit GATE_LOCK_TIMEOUT seconds, default 120) and writes the state
  through a temporary file in <out> and mv, so concurrent gates are safe.
  --structural and --dry-run take the lock shared, and only when the lock file
  exists: they create and write nothing, so they also run on a read-only run
  directory.

Re-running a passed gate: when current_iteration.txt already names v(K+1),
the transition gate re-checks vK (drift is then judged beyond v(K+1)); if
every check passes it exits 0 with a note and writes nothing, so a resumed
agent may re-run it safely. Any other mismatch between vK and the state fails.

Output: [FAIL]/[PASS] lines and a one-line summary on stdout, e.g.
  gate: v1 passed (transition); current_iteration.txt -> v2
  gate: v1 passed (structural checks, transition); current_iteration.txt not written
  gate: v1 passed (dry run, transition); current_iteration.txt not written
  gate: v1 FAILED: 2 checks
Usage errors go to stderr.

Exit codes:
  0  every check passed (transition: the state now names v(K+1);
     --structural, --dry-run and --final: nothing was written)
  1  at least one check failed: the state is not changed (except that the
     first v0 transition gate has created it with v0; --structural and
     --dry-run never create it), or the lock could not be taken
  2  usage error: no or extra argument, unknown option, a path that is not a
     directory, a directory name that is not v<number> (v0, v1, ...; no
     leading zeros), or <out> not writable for the lock file (not checked
     with --structural or --dry-run)
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
# Sets DIG to the sha256 of a file's bytes (read from stdin so odd names are not escaped), from DIGEST_OF where
# load_records put it; DIG is empty (and it returns 1) when the file cannot be read.  No process for a file
# already hashed: the checks compare hashes of many files, and a subshell each was a large part of a run.
declare -A DIGEST_OF=()
digest() {
  local line
  if [[ -n ${DIGEST_OF[$1]+x} ]]; then DIG=${DIGEST_OF[$1]}; return 0; fi
  DIG=''
  line=$(sha256sum <"$1") || return 1
  DIG=${line%% *}
}

# Returns 0 when the sha256 of file $1 (empty when it cannot be read) is not $2.
hash_differs() {
  digest "$1"
  [[ $DIG != "$2" ]]
}

# Returns 0 when file $1 is missing or its sha256 is not $2.
file_differs() {
  [[ ! -f $1 ]] || hash_differs "$1" "$2"
}

# Returns 0 when files $1 and $2 have the same sha256 (both unreadable count as the same, as two empty hashes).
same_bytes() {
  local first
  digest "$1"; first=$DIG
  digest "$2"
  [[ $first == "$DIG" ]]
}

# The files whose sha256 the checks may need, into PREFETCH ($1: the number of records parsed): ref.py, run.json,
# each version's kernel sources, hypothesis.txt and kbs_evidence.md, and the files the records name.  A gate
# run hashes each of them once or more; load_records hashes them all with the records, in one sha256sum.  The
# gate writes none of them; a file that was not hashed there is hashed where a check needs it (and fails there
# as before).
prefetch_paths() {
  local f i item items=() n=$1
  declare -A seen=()
  PREFETCH=()
  for f in "$OUT/ref.py" "$OUT/run.json" "$OUT"/v[0-9]*/{hypothesis.txt,kbs_evidence.md,*.py,*.cu}; do
    seen[$f]=1
  done
  for ((i = 1; i <= n; i++)); do
    [[ ${R[$i.version]:-} =~ ^v[0-9]+$ && -n ${R[$i.files]:-} ]] || continue
    IFS=, read -r -a items <<<"${R[$i.files]}"
    for item in "${items[@]}"; do seen[$OUT/${R[$i.version]}/${item%:*}]=1; done
  done
  for f in "${!seen[@]}"; do [[ -f $f && ! -L $f ]] && PREFETCH+=("$f"); done
  return 0
}

# Hash PREFETCH into DIGEST_OF by one sha256sum (where load_records could not hash them with the records).
prefetch_digests() {
  local i
  sums_of "${PREFETCH[@]}" || return 0
  for i in "${!PREFETCH[@]}"; do
    [[ ${SUMS[i]} =~ ^[0-9a-f]{64}$ ]] && DIGEST_OF[${PREFETCH[i]}]=${SUMS[i]}
  done
  return 0
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

# The kernel text with comments and insignificant whitespace removed (check 10).  Given two files, one awk
# process normalises both and prints "same" or "differ" instead.
normalise_kernel() {
  awk '
    function cu_normal(buf,   out, b, l, rest, e) {
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
      gsub(/[ \t\r\n\f\v]+/, "", out); return out
    }
    { f = (FILENAME == ARGV[1]) ? 1 : 2 }
    FILENAME ~ /\.py$/ {
      sub(/\r$/, ""); sub(/#.*/, "")
      match($0, /^[ \t]*/); lead = substr($0, 1, RLENGTH); rest = substr($0, RLENGTH + 1)
      gsub(/[ \t]+/, "", rest)
      if (rest != "") T[f] = T[f] lead rest "\n"
      next
    }
    { B[f] = B[f] $0 "\n" }
    END {
      for (f = 1; f < ARGC; f++) if (ARGV[f] !~ /\.py$/) T[f] = cu_normal(B[f])
      if (ARGC > 2) { same = (T[1] == T[2]) ? "same" : "differ"; print same } else printf "%s", T[1]
    }' "$@"
}

# A prediction line that cannot fail or cannot hold whatever the next version measures, as "'<line>' <why>"
# (empty: it can): every ncu.json KEY is non-negative and a _pct KEY is at most 100 (the hypothesis step refuses
# the same lines, and a duration bound over 10x off the measured value).  An awk function (check 14).
# shellcheck disable=SC2016  # an awk program
readonly SENSELESS_AWK='
  function senseless(line,   s, n, P, metric, rest, rel, pct, what, why, x, op) {
    sub(/^[ \t]+/, "", line); sub(/[ \t]+$/, "", line)
    s = line; gsub(/[ \t]/, "", s); n = split(s, P, ":"); metric = P[n - 1]; rest = P[n]
    rel = (rest ~ /%$/); sub(/%$/, "", rest); pct = (metric ~ /_pct$/)
    what = pct ? metric " is a percentage, from 0 to 100" : metric " is never negative (no time, byte or count is)"
    why = ""
    if (rest ~ /^[-+]/) {
      x = rest + 0
      if (rel && x <= -100) why = "cannot hold: a measured value cannot fall by 100% or more"
      else if (!rel && pct && (x > 100 || x < -100)) why = "cannot hold: " what ", so it cannot move by more than 100 points"
    } else {
      op = substr(rest, 1, rest ~ /^(<=|>=|==)/ ? 2 : 1); x = substr(rest, length(op) + 1) + 0
      if (op == "==") op = "="
      if ((op == ">=" && x <= 0) || (op == ">" && x < 0) || (pct && ((op == "<=" && x >= 100) || (op == "<" && x > 100))))
        why = sprintf("cannot fail: %s, so every value is %s %g; predict a bound the next version could miss", what, op, x)
      else if ((op == "<=" && x < 0) || (op == "<" && x <= 0) || (op == "=" && x < 0) ||
               (pct && ((op == ">=" && x > 100) || (op == ">" && x >= 100) || (op == "=" && x > 100))))
        why = sprintf("cannot hold: %s, so no value is %s %g", what, op, x)
    }
    return (why == "") ? "" : sprintf("\047%s\047 %s", line, why)
  }
'

# What the checks read in a version's text files, by file name (one awk process for all of them, scan_version):
#   hypothesis.txt     hyp_missing  the first heading of hyp_hs missing or out of order, each alone on its line (check 2)
#                      hyp_empty    every heading whose body holds no real text (check 9)
#                      body:<h>     the lines under heading <h> (Version:, Expected metric movement:, Evidence used:;
#                                   check 14), and per line of the second, in senseless, "+" and what SENSELESS_AWK
#                                   says of it, or "-"
#   kbs_evidence.md    kbs_missing  the first section of kbs_hs missing or out of order; the first is a prefix, lines
#                                   inside ``` fences are skipped (check 3)
#                      kbs_empty    every section whose body holds no real text (check 9)
#   correctness.md     result       "no Result line", "Result is <value>" for the first Result that is not PASS or
#                                   ALL PASS, or nothing (check 8)
#   kbs_queries.jsonl  jsonl        the number of the first line that is not a JSON object (check 12)
# A body holds real text when its words, filler words aside (tbd, tba, todo, n/a, na, none, nothing, fixme, xxx,
# placeholder, ...), hold at least 4 letters; a fenced block counts; Version: is exempt (check 14 reads it).
# With -v only=<tag> it prints that result's lines; else, for each tag of each file named, the tag, its number
# of lines and the lines.
# shellcheck disable=SC2016  # an awk program
readonly VERSION_TEXT_AWK=$SENSELESS_AWK'
  BEGIN {
    nh = split(hyp_hs, HH, "|"); for (j = 1; j <= nh; j++) isHH[HH[j]] = 1
    nk = split(kbs_hs, KH, "|")
    nf = split("tbd tba todo n/a na none nothing fixme xxx placeholder same above idem etc", F, " ")
    for (j = 1; j <= nf; j++) filler[F[j]] = 1
    hi = 1; ki = 1
    BODY["Version:"] = 1; BODY["Expected metric movement:"] = 1; BODY["Evidence used:"] = 1
  }
  function real(text,   w, m, j, letters) {
    m = split(tolower(text), w, /[^a-z0-9\/]+/); letters = 0
    for (j = 1; j <= m; j++) if (!(w[j] in filler)) { gsub(/[^a-z]/, "", w[j]); letters += length(w[j]) }
    return letters >= 4
  }
  function put(tag, line) { OUT[tag, ++NOUT[tag]] = line }
  function close_section(tag, cur, body, text) { if (cur != "" && cur != "Version:" && !body && !real(text)) put(tag, cur) }
  FNR == 1 { role = FILENAME; sub(/.*\//, "", role) }
  role == "hypothesis.txt" {
    sub(/\r$/, ""); t = $0; sub(/[ \t]+$/, "", t)
    if (hi <= nh && t == HH[hi]) hi++
    if (t in isHH) { close_section("hyp_empty", hcur, 0, htext); hcur = t; htext = ""; next }
    htext = htext " " t
    if (hcur in BODY) put("body:" hcur, $0)
    if (hcur == "Expected metric movement:") { v = senseless($0); put("senseless", (v == "") ? "-" : "+" v) }
    next
  }
  role == "kbs_evidence.md" {
    sub(/\r$/, ""); t = $0; sub(/[ \t]+$/, "", t)
    if (t ~ /^```/) { kfence = !kfence; kbody = 1; next }
    if (!kfence && ki <= nk && (t == KH[ki] || (ki == 1 && index(t, KH[1]) == 1))) ki++
    if (!kfence && t ~ /^##?[ \t]/) { close_section("kbs_empty", kcur, kbody, ktext); kcur = (t ~ /^# /) ? "" : t; kbody = 0; ktext = ""; next }
    ktext = ktext " " t
    next
  }
  role == "correctness.md" {
    line = $0; sub(/\r$/, "", line)
    if (line ~ /^ ? ? ?(```|~~~)/) { rfence = !rfence; next }
    if (rfence || line ~ /^(    |\t)/) next
    gsub(/\*\*|__|`/, "", line)
    if (line ~ /^[ \t]*\|[ \t]*[Rr]esult[ \t]*\|/) {
      sub(/^[ \t]*\|[ \t]*[Rr]esult[ \t]*\|[ \t]*/, "", line); sub(/[ \t]*\|.*$/, "", line)
    } else if (line ~ /^[ \t]*([-*][ \t]+)?[Rr]esult[ \t]*:/) {
      sub(/^[ \t]*([-*][ \t]+)?[Rr]esult[ \t]*:[ \t]*/, "", line); sub(/[ \t]+$/, "", line)
    } else next
    rseen = 1
    if (line != "PASS" && line != "ALL PASS" && rbad == "") rbad = (line == "" ? "(empty)" : line)
    next
  }
  role == "kbs_queries.jsonl" {
    if (qbad != "") next
    sub(/\r$/, ""); t = $0; gsub(/^[ \t]+|[ \t]+$/, "", t)
    if (t != "" && (substr(t, 1, 1) != "{" || substr(t, length(t)) != "}")) qbad = FNR
    next
  }
  END {
    for (a = 1; a < ARGC; a++) { r = ARGV[a]; sub(/.*\//, "", r); named[r] = 1 }
    if ("hypothesis.txt" in named) {
      if (hi <= nh) put("hyp_missing", HH[hi])
      close_section("hyp_empty", hcur, 0, htext)
      ntags = split("hyp_missing|hyp_empty|body:Version:|body:Expected metric movement:|body:Evidence used:|senseless", TAGS, "|")
    }
    if ("kbs_evidence.md" in named) {
      if (ki <= nk) put("kbs_missing", KH[ki])
      close_section("kbs_empty", kcur, kbody, ktext)
      TAGS[++ntags] = "kbs_missing"; TAGS[++ntags] = "kbs_empty"
    }
    if ("correctness.md" in named) {
      if (!rseen) put("result", "no Result line"); else if (rbad != "") put("result", "Result is " rbad)
      TAGS[++ntags] = "result"
    }
    if ("kbs_queries.jsonl" in named) {
      if (qbad != "") put("jsonl", qbad)
      TAGS[++ntags] = "jsonl"
    }
    if (only != "") { for (j = 1; j <= NOUT[only]; j++) print OUT[only, j]; exit }
    for (a = 1; a <= ntags; a++) {
      tag = TAGS[a]; print tag; print NOUT[tag] + 0
      for (j = 1; j <= NOUT[tag]; j++) print OUT[tag, j]
    }
  }
'

# Runs VERSION_TEXT_AWK on vK's text files that the mode reads (hypothesis.txt and kbs_evidence.md; with the
# content checks also correctness.md and kbs_queries.jsonl) and can read, into SCAN[tag]: each result's lines as
# $(...) would hold them.
# NUL_FILES: those of them that hold a NUL byte (read stops there: a line would be judged on what comes before it;
# check 1 fails them).
declare -A SCAN=()
NUL_FILES=()
scan_version() {
  local f paths=() out=() i=0 c tag v
  SCAN=() NUL_FILES=()
  for f in hypothesis.txt kbs_evidence.md correctness.md kbs_queries.jsonl; do
    [[ $f == hypothesis.txt || $f == kbs_evidence.md ]] || ((!STRUCTURAL)) || continue
    [[ -f $D/$f && -r $D/$f ]] || continue
    paths+=("$D/$f")
    IFS= read -r -d '' _ <"$D/$f" && NUL_FILES+=("$f")  # read finds its delimiter, a NUL, only where there is one
  done
  ((${#paths[@]})) || return 0
  mapfile -t out < <(awk -v hyp_hs="$HYP_HEADINGS" -v kbs_hs="$KBS_HEADINGS" "$VERSION_TEXT_AWK" "${paths[@]}")
  while ((i + 1 < ${#out[@]})); do
    tag=${out[i]} c=${out[i + 1]} v=''
    [[ $c =~ ^[0-9]+$ ]] || { SCAN=(); return 0; }
    for ((i += 2; c > 0; c--, i++)); do v+=${out[i]}$'\n'; done
    while [[ $v == *$'\n' ]]; do v=${v%$'\n'}; done
    SCAN[$tag]=$v
  done
}

# Sets TEXT to result $1 (VERSION_TEXT_AWK) of vK's file $2: from scan_version where it read the file, else by an
# awk process of its own, which says why it cannot read it.
text_result() {
  if [[ -n ${SCAN[$1]+x} ]]; then TEXT=${SCAN[$1]}; return 0; fi
  TEXT=$(awk -v only="$1" -v hyp_hs="$HYP_HEADINGS" -v kbs_hs="$KBS_HEADINGS" "$VERSION_TEXT_AWK" "$2")
}

# --- signed records (records.log; format in references/artifacts.md) -------------------------
# The key (KEY_FILE): $KERNEL_LOOP_RECORD_KEY names its file, else ${XDG_CONFIG_HOME:-$HOME/.config}/kernel-loop/record.key:
# 64 hex characters, the 32 bytes of an HMAC-SHA256 key.  HMAC is computed here with sha256sum alone
# (RFC 2104: sha256((K ^ opad) || sha256((K ^ ipad) || message))), so the key never appears in a process list.
key_file() {
  if [[ -n ${KERNEL_LOOP_RECORD_KEY:-} ]]; then KEY_FILE=$KERNEL_LOOP_RECORD_KEY
  else KEY_FILE="${XDG_CONFIG_HOME:-$HOME/.config}/kernel-loop/record.key"; fi
  while [[ $KEY_FILE == *$'\n' ]]; do KEY_FILE=${KEY_FILE%$'\n'}; done  # as $(...) would
}

# Sets IPAD, OPAD (printf escape strings of the padded key) and KEY_BYTES (the key's), or KEY_ERR and returns 1.
# KEY_ID (set_key_id) is hashed with the records by load_records.
load_key() {
  local f text='' i b esc=''
  key_file; f=$KEY_FILE
  KEY_ERR='' IPAD='' OPAD='' KEY_ID='' KEY_BYTES=''
  if [[ ! -f $f ]]; then
    KEY_ERR="no record key at $f: point KERNEL_LOOP_RECORD_KEY at the key file this run was made with (the one KERNEL_LOOP_RECORD_KEY named at init, else the ~/.config/kernel-loop/record.key of the user who ran init); a new key cannot sign an existing run's records (init makes one only for a new run), and without it no record can be verified"
    return 1
  fi
  dir_of "$f"
  case $(cd -- "$DIR" 2>/dev/null && pwd)/ in
    "$OUT"/*) KEY_ERR="the record key $f lies inside the run directory: it must live outside it"; return 1 ;;
  esac
  IFS= read -r text <"$f" || true
  text=${text%$'\r'}
  if [[ ! $text =~ ^[0-9a-f]{64}$ ]]; then
    KEY_ERR="the record key $f is not 64 lowercase hex characters: it is corrupt"
    return 1
  fi
  for ((i = 0; i < 64; i++)); do
    b=0
    ((i < 32)) && b=$((16#${text:i*2:2}))
    printf -v esc '\\x%02x' $((b ^ 0x36)); IPAD+=$esc
    printf -v esc '\\x%02x' $((b ^ 0x5c)); OPAD+=$esc
  done
  for ((i = 0; i < 64; i += 2)); do KEY_BYTES+="\\x${text:i:2}"; done
}

# Sets KEY_ID (the first 16 hex of the sha256 of the key's bytes) where load_records did not.
set_key_id() {
  local id
  [[ -z $KEY_ID && -n $KEY_BYTES ]] || return 0
  # shellcheck disable=SC2059  # KEY_BYTES holds this script's own \xHH escapes
  id=$(printf "$KEY_BYTES" | sha256sum)
  KEY_ID=${id:0:16}
}

# HMAC-SHA256 (hex) of the string $1 with the loaded key.
hmac_hex() {
  local inner outer esc='' i
  # shellcheck disable=SC2059  # IPAD/OPAD/esc hold this script's own \xHH escapes
  inner=$({ printf "$IPAD"; printf '%s' "$1"; } | sha256sum)
  for ((i = 0; i < 64; i += 2)); do esc+="\\x${inner:i:2}"; done
  # shellcheck disable=SC2059
  outer=$({ printf "$OPAD"; printf "$esc"; } | sha256sum)
  printf '%s' "${outer%% *}"
}

# sha256 (hex) of each file named, in order, into the array SUMS: one sha256sum process for them all.
sums_of() {
  local out=() item
  SUMS=()
  (($#)) || return 0
  mapfile -t out < <(sha256sum -- "$@") || return 1
  ((${#out[@]} == $#)) || return 1
  for item in "${out[@]}"; do SUMS+=("${item%% *}"); done
}

# Parse <out>/records.log into R["<n>.<field>"] (n = 1..REC_N) and REC_LINE[n]; $1 = 1 verifies the chain
# and every signature (the key must be loaded).  Stops at the first bad line: REC_ERR says why, and REC_N
# counts the records before it.  The hashes are computed in batches (the lines, the inner and the outer
# HMAC inputs as files in a temporary folder outside <out>, one sha256sum each), so the cost of a gate run
# barely grows with the number of records; without a temporary folder it falls back to one record at a time.
load_records() {
  local verify=$1 path="$OUT/$RECORDS" line n=0 prev=$ZERO_HASH f k fields i body parse_err='' tmp esc j pre=0
  local -a lines=() bodies=() names=() chain=() macs=() inner=()
  R=() REC_LINE=() REC_N=0 REC_ERR=''
  if [[ ! -f $path ]]; then
    REC_ERR="records.log is missing: the helpers sign every result there (kernel-loop init starts it); a run without it cannot pass"
    return 1
  fi
  while IFS= read -r line || [[ -n $line ]]; do
    n=$((n + 1))
    [[ -n $line ]] || continue
    i=$((${#lines[@]} + 1))
    if [[ $line == *$'\t\t'* || $line == $'\t'* || $line == *$'\t' || $line == *$'\r'* ]]; then
      parse_err="records.log line $n is not a record (an empty field or a CR): records.log is written only by the helpers and the gate"; break
    fi
    IFS=$'\t' read -r -a fields <<<"$line"
    for f in "${fields[@]}"; do
      k=${f%%=*}
      if [[ $f != *=* || -n ${R[$i.$k]+x} ]]; then
        parse_err="records.log line $n is not a record (field '${f:0:30}' is not key=value, or repeats a key): records.log is written only by the helpers and the gate"; break 2
      fi
      R[$i.$k]=${f#*=}
    done
    if [[ ${R[$i.rec]:-} != 1 || ${R[$i.seq]:-} != "$i" || -z ${R[$i.mac]:-} ]]; then
      parse_err="records.log line $n is not record $i of the chain: a line was added, removed or reordered by hand"; break
    fi
    lines[i]=$line bodies[i]=${line%$'\t'mac=*} REC_LINE[i]=$n
  done <"$path"
  # the hashes: sha256 of every line (the chain), and HMAC-SHA256 of every body (the signatures); the inner
  # HMAC inputs go with the lines, the key (its id) and the files the checks will hash (PREFETCH, when every
  # one is readable) into the first sha256sum, the outer inputs into the second
  n=${#lines[@]}
  if ((n)) && tmp=$(mktemp -d "${TMPDIR:-/tmp}/kernel-loop-gate.XXXXXX" 2>/dev/null); then
    names=()
    for ((i = 1; i <= n; i++)); do printf '%s' "${lines[i]}" >"$tmp/l$i"; names+=("$tmp/l$i"); done
    if ((verify)); then
      # shellcheck disable=SC2059  # IPAD/OPAD/KEY_BYTES hold this script's own \xHH escapes
      for ((i = 1; i <= n; i++)); do { printf "$IPAD"; printf '%s' "${bodies[i]}"; } >"$tmp/i$i"; names+=("$tmp/i$i"); done
      # shellcheck disable=SC2059
      printf "$KEY_BYTES" >"$tmp/k"; names+=("$tmp/k")
      PREFETCH=()
      if [[ -z $parse_err ]]; then
        prefetch_paths "$n"; pre=1
        for f in "${PREFETCH[@]}"; do [[ -r $f ]] || { PREFETCH=(); pre=0; break; }; done
        names+=("${PREFETCH[@]}")
      fi
    fi
    if sums_of "${names[@]}"; then
      chain=("" "${SUMS[@]:0:n}")
      if ((verify)); then
        [[ ${SUMS[2 * n]} =~ ^[0-9a-f]{64}$ ]] && KEY_ID=${SUMS[2 * n]:0:16}
        for i in "${!PREFETCH[@]}"; do
          [[ ${SUMS[2 * n + 1 + i]} =~ ^[0-9a-f]{64}$ ]] && DIGEST_OF[${PREFETCH[i]}]=${SUMS[2 * n + 1 + i]}
        done
        PREFETCHED=$pre
        inner=("${SUMS[@]:n:n}")
        names=()
        for ((i = 1; i <= n; i++)); do
          esc=''; for ((j = 0; j < 64; j += 2)); do esc+="\\x${inner[i - 1]:j:2}"; done
          # shellcheck disable=SC2059
          { printf "$OPAD"; printf "$esc"; } >"$tmp/o$i"; names+=("$tmp/o$i")
        done
        sums_of "${names[@]}" && macs=("" "${SUMS[@]}")
        ((${#macs[@]})) || chain=()
      fi
    fi
    rm -rf -- "$tmp"
  fi
  ((verify)) && set_key_id
  for ((i = 1; i <= n; i++)); do
    if [[ ${R[$i.prev]:-} != "$prev" ]]; then
      REC_ERR="records.log line ${REC_LINE[i]} does not follow the line before it: the chain is broken (a line was edited, removed or reordered)"; return 1
    fi
    if ((verify)); then
      if ((${#macs[@]})); then body=${macs[i]}; else body=$(hmac_hex "${bodies[i]}"); fi
      if [[ $body != "${R[$i.mac]}" ]]; then
        if [[ -n ${R[$i.keyid]:-} && ${R[$i.keyid]} != "$KEY_ID" ]]; then
          REC_ERR="records.log line ${REC_LINE[i]} was signed with another key (key id ${R[$i.keyid]}, yours is $KEY_ID at $KEY_FILE): use the key the run was made with"
        else
          REC_ERR="records.log line ${REC_LINE[i]}: the signature does not verify: the record was edited after it was signed"
        fi
        return 1
      fi
    fi
    if ((${#chain[@]})); then prev=${chain[i]}; else body=$(printf '%s' "${lines[i]}" | sha256sum); prev=${body%% *}; fi
    REC_N=$i
  done
  if [[ -n $parse_err ]]; then REC_ERR=$parse_err; return 1; fi
  REC_TAIL=$prev
}

# Sets LATEST to the index of the last record of step $1 for version $2 ("" for any); returns 1 if none.
latest_record() {
  local i
  LATEST=''
  for ((i = REC_N; i >= 1; i--)); do
    if [[ ${R[$i.step]:-} == "$1" && ( -z $2 || ${R[$i.version]:-} == "$2" ) ]]; then LATEST=$i; return 0; fi
  done
  return 1
}

# Sets FIRST to the index of the first record of step $1 for version $2, and COUNT to how many there are.
first_record() {
  local i
  FIRST='' COUNT=0
  for ((i = 1; i <= REC_N; i++)); do
    if [[ ${R[$i.step]:-} == "$1" && ${R[$i.version]:-} == "$2" ]]; then
      [[ -n $FIRST ]] || FIRST=$i
      COUNT=$((COUNT + 1))
    fi
  done
  [[ -n $FIRST ]]
}

# Sets CHANGED to the first file of record $1's "files" list (relative to folder $2) that is missing or
# changed; empty when every one matches.
changed_file() {
  local item name items=()
  CHANGED=''
  IFS=, read -r -a items <<<"${R[$1.files]:-}"
  for item in "${items[@]}"; do
    name=${item%:*}
    if file_differs "$2/$name" "${item##*:}"; then CHANGED=$name; return; fi
  done
}

# Sets RUN_DEVICE to the device a run measures on, as the helpers record it: cpu, or cuda:<run.json gpu>.
run_device() {
  [[ -n ${RUN_DEVICE:-} ]] && return 0
  read_run_json
  if [[ ${RJ[device]} == cpu ]]; then RUN_DEVICE=cpu; else RUN_DEVICE="cuda:${RJ[gpu]:-0}"; fi
}

# Append a signed gate record for version $1 (the key is loaded).  Returns 1 when it cannot be written.
append_gate_record() {
  local kd=$1 d="$OUT/v$1" prev=${REC_TAIL:-$ZERO_HASH} body files='' f names=(hypothesis.txt kbs_evidence.md) t
  find_kernel "$d" && [[ $KERNEL =~ ^[A-Za-z0-9._-]+$ ]] && names+=("$KERNEL")  # check 4 refused any other name
  for f in "${names[@]}"; do
    [[ -f $d/$f ]] && { digest "$d/$f"; files+="${files:+,}$f:$DIG"; }
  done
  printf -v t '%(%Y-%m-%dT%H:%M:%S%z)T' -1
  body="rec=1"$'\t'"seq=$((REC_N + 1))"$'\t'"prev=$prev"$'\t'"step=gate"$'\t'"version=v$kd"$'\t'"time=$t"$'\t'"result=passed"$'\t'"files=$files"$'\t'"keyid=$KEY_ID"
  printf '%s\tmac=%s\n' "$body" "$(hmac_hex "$body")" >>"$OUT/$RECORDS" || return 1
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
  HYP_OK=0 KBS_OK=0 KERNEL='' KERNEL_OK=0 PREV_KERNEL='' HITS='' HITS_OK=0
  if [[ ! -d $D ]]; then
    fail "$V: the folder $V is missing: every version v0..v$N must exist for the final audit"
    return 1
  fi
  if [[ -L $D ]]; then
    fail "$V: $V is a symbolic link: each version must be a real directory inside the run directory"
    return 1
  fi
}

# 1. measured and written files (correctness.bats)
check_1_files() {
  local f missing=()
  for f in correctness.md ncu_summary.md ncu_details.md kbs_evidence.md; do
    nonempty "$D/$f" || missing+=("$f")
  done
  if ((${#missing[@]})); then
    fail "$V: missing or empty: ${missing[*]} (correctness.md: kernel-loop correctness; ncu_*: kernel-loop profile; kbs_evidence.md: kernel-loop kbs evidence, then fill it in)"
  else
    pass "$V: correctness.md, ncu_summary.md, ncu_details.md, kbs_evidence.md present"
  fi
  if ((${#NUL_FILES[@]})); then
    fail "$V: ${NUL_FILES[*]}: holds a NUL byte; the loop's text files are plain text (write the file again without it)"
  fi
}

# Checks 2 and 3: file $1's headings in order (result $2 of VERSION_TEXT_AWK: hyp_missing or kbs_missing); on a
# miss the [FAIL] line is the printf format $3 with the missing heading, else the [PASS] line $4.
headings_in_order() {
  local msg
  text_result "$2" "$1"
  if [[ -n $TEXT ]]; then
    # shellcheck disable=SC2059  # $3 is this script's own format string
    printf -v msg "$3" "$TEXT"
    fail "$V: $msg"
    return 1
  fi
  pass "$V: $4"
}

# 2. hypothesis headings (hypothesis.bats)
check_2_hypothesis_headings() {
  local hyp="$D/hypothesis.txt"
  ((NEED_HYP)) || [[ -e $hyp ]] || return 0
  if ! nonempty "$hyp"; then
    fail "$V: hypothesis.txt is missing or empty: write the single next change (kernel-loop hypothesis drafts it; format in references/hypothesis.md)"
    return
  fi
  headings_in_order "$hyp" hyp_missing \
    "hypothesis.txt lacks the heading '%s' (missing, out of order, or not alone on its line); headings in order: ${HYP_HEADINGS//|/ }" \
    "hypothesis.txt has every heading in order" && HYP_OK=1
  return 0
}

# 3. kbs_evidence.md headings (kbs.bats)
check_3_kbs_headings() {
  local kbs="$D/kbs_evidence.md"
  nonempty "$kbs" || return 0
  headings_in_order "$kbs" kbs_missing \
    "kbs_evidence.md lacks '%s' (missing or out of order); sections in order: # KBS Evidence, ## NCU Facts, ## Queries, ## Selected Evidence, ## Rejected / Limits, ## Decision Link" \
    "kbs_evidence.md has every section in order" && KBS_OK=1
  return 0
}

# Sets EXTRA to the other source-like files in folder $1 besides kernel $2 and ref.py, space-separated
# (check 4): code a kernel would load from beside itself is not what the records bind.
extra_sources() {
  local f n out=()
  for f in "$1"/*.py "$1"/*.cu "$1"/*.cuh "$1"/*.h "$1"/*.hpp "$1"/*.cpp "$1"/*.cc "$1"/*.c "$1"/*.so "$1"/*.ptx "$1"/*.cubin; do
    n=${f##*/}
    [[ $n == "$2" || $n == ref.py ]] || out+=("$n")
  done
  EXTRA=${out[*]}
}

# 4. exactly one kernel, non-empty, bytes differ from the previous version (kernel.bats)
check_4_kernel() {
  local kname prev="$OUT/v$((VK - 1))"
  if ! find_kernel "$D"; then
    fail "$V: $KERNEL_ERR"
  elif [[ ! $KERNEL =~ ^[A-Za-z0-9._-]+$ ]]; then
    fail "$V: the kernel file name '$KERNEL' holds characters other than letters, digits, '.', '_' and '-': rename it kernel.py or kernel.cu"
  elif extra_sources "$D" "$KERNEL"; [[ -n $EXTRA ]]; then
    fail "$V: $V holds source files besides $KERNEL: $EXTRA (a version is one kernel file; code it loads from beside it is not measured): move them out"
  elif [[ -L $D/$KERNEL ]]; then
    fail "$V: $KERNEL is a symbolic link: copy the kernel into $V so the version keeps its own source"
  elif [[ ! -s $D/$KERNEL ]]; then
    fail "$V: $KERNEL is empty"
  elif ((VK > 0)); then
    kname=$KERNEL
    if ! find_kernel "$prev"; then
      fail "$V: cannot compare with v$((VK - 1)): v$((VK - 1)) has no single kernel file"
    elif same_bytes "$D/$kname" "$prev/$KERNEL"; then
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
  text_result result "$D/correctness.md"; bad=$TEXT
  if [[ -n $bad ]]; then
    fail "$V: correctness has not passed ($bad in correctness.md): fix the kernel and re-run kernel-loop correctness"
  else
    pass "$V: correctness.md records PASS"
  fi
}

# The numbers of the lines of file $1 that hold TODO_MARK, each followed by a space, into TODO_LINES (no process).
todo_lines() {
  local lines=() i
  TODO_LINES=''
  mapfile -t lines <"$1" 2>/dev/null || return 0
  for i in "${!lines[@]}"; do [[ ${lines[i]} == *"$TODO_MARK"* ]] && TODO_LINES+="$((i + 1)) "; done
  return 0
}

# 9. templates filled in (templates.bats; hypothesis.bats and kbs.bats test each file's half)
check_9_templates_filled() {
  local f hits line sep
  for f in kbs_evidence.md hypothesis.txt; do
    [[ -f $D/$f ]] || continue
    todo_lines "$D/$f"; hits=$TODO_LINES
    if [[ -n $hits ]]; then
      fail "$V: $f still has $TODO_MARK on line(s) ${hits% }: replace each with real content"
    else
      pass "$V: $f has no $TODO_MARK"
    fi
  done
  if ((HYP_OK)); then
    text_result hyp_empty "$D/hypothesis.txt"; hits=${TEXT:+${TEXT//$'\n'/ } }
    if [[ -n $hits ]]; then fail "$V: hypothesis.txt has empty heading(s): ${hits% } (write a real line under each: TBD, n/a, - or a word or two do not count)"
    else pass "$V: every hypothesis.txt heading has content"; fi
  fi
  if ((KBS_OK)); then
    text_result kbs_empty "$D/kbs_evidence.md"; hits='' sep=''
    if [[ -n $TEXT ]]; then
      while IFS= read -r line; do hits+="$sep\"$line\"" sep=', '; done <<<"$TEXT"
    fi
    if [[ -n $hits ]]; then fail "$V: kbs_evidence.md has empty section(s): $hits (write a real line under each: TBD, n/a, - do not count)"
    else pass "$V: every kbs_evidence.md section has content"; fi
  fi
}

# 10. change beyond whitespace and comments (kernel.bats)
check_10_kernel_change() {
  [[ -n $PREV_KERNEL ]] || return 0
  local verdict=''
  if [[ -r $D/$KERNEL && -r $PREV_KERNEL ]]; then
    verdict=$(normalise_kernel "$D/$KERNEL" "$PREV_KERNEL")
  elif [[ $(normalise_kernel "$D/$KERNEL" | sha256sum) == "$(normalise_kernel "$PREV_KERNEL" | sha256sum)" ]]; then
    verdict=same
  fi
  if [[ $verdict == same ]]; then
    fail "$V: $KERNEL differs from v$((VK - 1)) only in whitespace or comments: make a real code change"
  else
    pass "$V: $KERNEL changes code, not only whitespace or comments"
  fi
}

# awk rules shared by tuning_values, kernel_count and tuning_changes.  For each line of a kernel file (fi: 1, or 2
# for a second file named): V[fi, name] collects its launch and tuning values: num_warps, num_stages, num_ctas,
# maxnreg, names holding BLOCK, TILE, WARPS, STAGES or THREADS, grid (as assignments, keyword arguments, constexpr
# or #define), each <<<...>>> launch configuration and each template argument list before one; C[fi] counts the
# kernels it defines (__global__, @triton.jit or @jit, @cute.kernel; comment lines aside).  A heuristic for the
# one-change warning, not a parser.
# shellcheck disable=SC2016  # an awk program
readonly KERNEL_SCAN_AWK='
  function arg_value(t,   i, c, d, v) {  # up to the first , ; or ) outside parentheses
    d = 0; v = ""
    for (i = 1; i <= length(t); i++) {
      c = substr(t, i, 1)
      if (c == "(" || c == "[") d++
      else if (c == ")" || c == "]") { if (d == 0) break; d-- }
      else if ((c == "," || c == ";") && d == 0) break
      v = v c
    }
    return v
  }
  function emit(name, val) {
    gsub(/^[ \t]+|[ \t]+$/, "", val)
    if (val == "" || val ~ /constexpr/) return
    if (!((fi, name) in V)) V[fi, name] = val
    else if (index("|" V[fi, name] "|", "|" val "|") == 0) V[fi, name] = V[fi, name] "|" val  # each distinct value once
  }
  { fi = (FILENAME == ARGV[1]) ? 1 : 2 }
  !/^[[:space:]]*(#|\/\/)/ && /__global__|@[[:space:]]*(triton\.)?jit([^A-Za-z0-9_]|$)|@[[:space:]]*cute\.kernel([^A-Za-z0-9_]|$)/ { C[fi]++ }
  { line = $0; sub(/\r$/, "", line)
    if (FILENAME ~ /\.py$/) sub(/#.*/, "", line); else sub(/\/\/.*/, "", line)
    if (match(line, /^[ \t]*#[ \t]*define[ \t]+[A-Za-z_][A-Za-z0-9_]*[ \t]+/)) {
      split(substr(line, RSTART), w, /[ \t]+/); nm = (w[1] == "#") ? w[3] : w[2]
      if (w[1] == "") nm = (w[2] == "#") ? w[4] : w[3]
      if (nm ~ /(BLOCK|TILE|WARPS|STAGES|THREADS)/) emit(nm, substr(line, RSTART + RLENGTH))
    }
    rest = line
    while (match(rest, /(num_warps|num_stages|num_ctas|maxnreg|grid|[A-Za-z0-9_]*(BLOCK|TILE|WARPS|STAGES|THREADS)[A-Za-z0-9_]*)[ \t]*[:=][^=]/)) {
      frag = substr(rest, RSTART, RLENGTH - 1); rest = substr(rest, RSTART + RLENGTH - 1)
      nm = frag; sub(/[ \t]*[:=]$/, "", nm)
      emit(nm, arg_value(rest))
    }
    rest = line
    while (match(rest, /<<<[^>]*>>>/)) { emit("<<<launch>>>", substr(rest, RSTART + 3, RLENGTH - 6)); pre = substr(rest, 1, RSTART - 1)
      if (match(pre, /<[^<>]*>[ \t]*$/)) emit("<template args>", substr(pre, RSTART + 1, RLENGTH - 2))
      rest = substr(rest, index(rest, ">>>") + 3) }
  }
'

# Launch and tuning values of kernel file $1, one "name=value" per line, sorted (KERNEL_SCAN_AWK).
tuning_values() {
  awk "$KERNEL_SCAN_AWK"'END { for (k in V) { split(k, P, SUBSEP); print P[2] "=" V[k] } }' "$1" | LC_ALL=C sort
}

# The number of kernels kernel file $1 defines (KERNEL_SCAN_AWK).
kernel_count() {
  awk "$KERNEL_SCAN_AWK"'END { print C[1] + 0 }' "$1"
}

# For kernel files $1 (the previous version's) and $2 (this one's), by one awk process: KERNELS_WAS and
# KERNELS_NOW (kernel_count of each), and in TUNING_CHANGED and TUNING_N what warn_tuning_changes's join of their
# tuning_values reports: the lines sorted as sort(1) sorts them (LC_ALL=C: by bytes), paired by name as join(1)
# pairs them, and a value compared with awk's != as awk reads a field.  Returns 1 where only that pipeline gives
# its output: a file that cannot be read, a \x1f in a line, or names out of order in the sorted lines (a name
# that extends another with a digit: join then says its input is not sorted and pairs what it meets).
tuning_changes() {
  local out=()
  [[ -r $1 && -r $2 ]] || return 1
  mapfile -t out < <(awk "$KERNEL_SCAN_AWK"'
    function row(k, a, b,   what) {  # a join output line "k a b", as the awk of warn_tuning_changes reads it
      split(a "\037" b, F, "\037")
      if (F[1] == F[2]) return
      what = (F[1] == "(none)") ? "new: " F[2] : (F[2] == "(none)") ? "removed: " F[1] : F[1] " -> " F[2]
      out = out sep k " (" what ")"; n++; sep = ", "
    }
    END {
      print C[1] + 0; print C[2] + 0
      for (k in V) { split(k, P, SUBSEP); g = P[1]; L[g, ++N[g]] = P[2] "=" V[k] }
      for (g = 1; g <= 2; g++) {
        for (a = 2; a <= N[g]; a++) {
          x = L[g, a]
          for (b = a - 1; b >= 1 && L[g, b] > x; b--) L[g, b + 1] = L[g, b]
          L[g, b + 1] = x
        }
        for (a = 1; a <= N[g]; a++) {
          e = index(L[g, a], "="); K[g, a] = substr(L[g, a], 1, e - 1); X[g, a] = substr(L[g, a], e + 1)
          if (index(L[g, a], "\037") || (a > 1 && !(K[g, a - 1] < K[g, a]))) { print "join"; exit }
        }
      }
      i = 1; j = 1
      while (i <= N[1] || j <= N[2]) {
        if (j > N[2] || (i <= N[1] && K[1, i] < K[2, j])) { row(K[1, i], X[1, i], "(none)"); i++ }
        else if (i > N[1] || K[2, j] < K[1, i]) { row(K[2, j], "(none)", X[2, j]); j++ }
        else { row(K[1, i], X[1, i], X[2, j]); i++; j++ }
      }
      print "paired"; print out; print n + 0
    }' "$1" "$2")
  [[ ${#out[@]} == 5 && ${out[2]} == paired && ${out[0]} =~ ^[0-9]+$ && ${out[1]} =~ ^[0-9]+$ && ${out[4]} =~ ^[0-9]+$ ]] ||
    return 1
  KERNELS_WAS=${out[0]} KERNELS_NOW=${out[1]} TUNING_CHANGED=${out[3]} TUNING_N=${out[4]}
}

# Warn (never fail) when vK changes more than one launch or tuning value against v(K-1); say instead what the
# transition is when its kernel is byte-identical to an earlier version's (a revert) or defines fewer kernels
# than v(K-1)'s (a fusion: the removed kernel's launch values go with it).
warn_tuning_changes() {
  [[ -n $PREV_KERNEL ]] || return 0
  local changed n j was now
  for ((j = 0; j < VK - 1; j++)); do
    if [[ -f $OUT/v$j/$KERNEL ]] && same_bytes "$OUT/v$j/$KERNEL" "$D/$KERNEL"; then
      printf "[INFO] %s: %s is byte-identical to v%s/%s: a revert to v%s (v%s's launch/tuning values go back to v%s's), one change\n" \
        "$V" "$KERNEL" "$j" "$KERNEL" "$j" "$((VK - 1))" "$j"
      return 0
    fi
  done
  if tuning_changes "$PREV_KERNEL" "$D/$KERNEL"; then
    changed=$TUNING_CHANGED n=$TUNING_N was=$KERNELS_WAS now=$KERNELS_NOW
  else
    changed=$(LC_ALL=C join -t $'\x1f' -a1 -a2 -e '(none)' -o 0,1.2,2.2 \
      <(tuning_values "$PREV_KERNEL" | sed 's/=/\x1f/') <(tuning_values "$D/$KERNEL" | sed 's/=/\x1f/') |
      awk -F '\x1f' '$2 != $3 { what = ($2 == "(none)") ? "new: " $3 : ($3 == "(none)") ? "removed: " $2 : $2 " -> " $3
                   printf "%s%s (%s)", sep, $1, what; n++; sep = ", " } END { printf "\n%d", n }')
    n=${changed##*$'\n'} changed=${changed%$'\n'*}
    was=$(kernel_count "$PREV_KERNEL") now=$(kernel_count "$D/$KERNEL")
  fi
  if ((now < was)); then
    local plural=s
    ((now == 1)) && plural=''
    printf '[INFO] %s: %s defines %s kernel%s where v%s/%s defines %s: a fusion that removes a kernel and its launch%s, one change\n' \
      "$V" "$KERNEL" "$now" "$plural" "$((VK - 1))" "$KERNEL" "$was" "${changed:+ (with it: $changed)}"
    return 0
  fi
  ((n >= 2)) || return 0
  printf '[WARN] %s: %s changes %s launch/tuning values against v%s: %s (one change per version makes each measurement attributable)\n' \
    "$V" "$KERNEL" "$n" "$((VK - 1))" "$changed"
}

# One [FAIL] for the first problem with record $1 (step $2 of version $V, files in $D), else nothing.
# Returns 0 when the record holds.
record_holds() {
  local i=$1 what=$2 want line bad
  line=${REC_LINE[$i]}
  if ((KERNEL_OK)) && hash_differs "$D/$KERNEL" "${R[$i.kernel]:-}"; then
    fail "$V: $KERNEL changed after $what ran (records.log line $line holds another hash): re-run kernel-loop $what"
    return 1
  fi
  if [[ ${R[$i.ref]:-} != "${R[1.ref]:-}" || ${R[$i.run]:-} != "${R[1.run]:-}" ]]; then
    fail "$V: $what ran with a ref.py or run.json other than the one init recorded (records.log line $line): re-run kernel-loop $what"
    return 1
  fi
  run_device; want=$RUN_DEVICE
  if [[ ${R[1.gpu]:--} != - && ${R[$i.gpu]:--} != "${R[1.gpu]}" ]]; then
    fail "$V: $what ran on a ${R[$i.gpu]:-unknown GPU}, but init measured this run's peaks on a ${R[1.gpu]} (records.log line $line): measure every version on the run's GPU"
    return 1
  fi
  if (( VK > 0 )) && first_record gate "v$((VK - 1))" && (( i < FIRST )); then
    fail "$V: its $what record (records.log line $line) comes before v$((VK - 1)) passed its gate (line ${REC_LINE[$FIRST]}): $V was measured before v$((VK - 1))'s decision was frozen; re-run kernel-loop $what"
    return 1
  fi
  if [[ ${R[$i.device]:-} != "$want" ]]; then
    fail "$V: $what ran on ${R[$i.device]:-an unknown device}, but this run measures on $want (records.log line $line): a CPU-mode result does not count for a GPU run; re-run kernel-loop $what on $want"
    return 1
  fi
  changed_file "$i" "$D"; bad=$CHANGED
  if [[ -n $bad ]]; then
    fail "$V: $bad changed after kernel-loop $what wrote it (records.log line $line): re-run kernel-loop $what"
    return 1
  fi
}

# 11. provenance: the signed correctness and profile records hold for vK as it is now (provenance.bats)
check_11_provenance() {
  ((REC_OK)) || return 0  # check 13 failed: no record can be trusted
  local ok=1
  if ! latest_record correctness "$V"; then
    fail "$V: records.log has no correctness record for $V: run kernel-loop correctness"; ok=0
  elif [[ ${R[$LATEST.result]:-} != PASS ]]; then
    fail "$V: the last correctness record of $V says ${R[$LATEST.result]:-nothing}, not PASS (records.log line ${REC_LINE[$LATEST]}): fix the kernel and re-run kernel-loop correctness"; ok=0
  else
    record_holds "$LATEST" correctness || ok=0
  fi
  if ! latest_record profile "$V"; then
    fail "$V: records.log has no profile record for $V: run kernel-loop profile"; ok=0
  elif [[ ${R[$LATEST.result]:-ok} != ok ]]; then
    fail "$V: the last profile record of $V says ${R[$LATEST.result]}, not ok (records.log line ${REC_LINE[$LATEST]}): the profile failed; fix what it reported, then re-run kernel-loop profile"; ok=0
  else
    record_holds "$LATEST" profile || ok=0
  fi
  ((ok)) && pass "$V: the signed correctness (PASS) and profile records match $V as it is now"
  return 0
}

# 12. KBS queries, logged by the helper (kbs.bats).  Sets HITS (comma list of the page ids they returned).
check_12_kbs_queries() {
  local q="$D/kbs_queries.jsonl" purpose bad
  HITS='' HITS_OK=0
  if [[ ! -f $q ]]; then
    fail "$V: kbs_queries.jsonl is missing: run kernel-loop kbs evidence (it logs a kernel and a bottleneck query)"
    return
  fi
  text_result jsonl "$q"; bad=$TEXT
  [[ -n $bad ]] && fail "$V: kbs_queries.jsonl line $bad is not a JSON object: only kernel-loop kbs writes this log"
  local lines=() line found
  mapfile -t lines <"$q" 2>/dev/null
  for purpose in kernel bottleneck; do
    found=0
    for line in "${lines[@]}"; do [[ $line =~ \"purpose\"[[:space:]]*:[[:space:]]*\"$purpose\" ]] && { found=1; break; }; done
    if ((found)); then
      pass "$V: kbs_queries.jsonl has a $purpose query"
    else
      fail "$V: kbs_queries.jsonl has no \"purpose\": \"$purpose\" query: run kernel-loop kbs evidence"
    fi
  done
  ((REC_OK)) || return 0
  if ! latest_record kbs "$V"; then
    fail "$V: records.log has no kbs record for $V: log the queries with kernel-loop kbs evidence (or kbs query --log)"
  elif [[ ${R[$LATEST.corpus]:-bundled} != bundled ]]; then
    fail "$V: a logged query searched a corpus other than the bundled KBS (${R[$LATEST.corpus]}): cite only the bundled knowledge base; query other corpora without --log"
  elif changed_file "$LATEST" "$D"; [[ -n $CHANGED ]]; then
    fail "$V: kbs_queries.jsonl differs from what kernel-loop kbs logged (records.log line ${REC_LINE[$LATEST]}): it was edited by hand; log queries only through kernel-loop kbs"
  else
    HITS=${R[$LATEST.hits]:-} HITS_OK=1
    pass "$V: kbs_queries.jsonl is the one kernel-loop kbs logged"
  fi
}

# A [WARN] line for the kbs:ID pages the gated version's kbs_evidence.md cites that no query logged for it returned
# (an agent's trial cited a page opened for an earlier version): never a failure, since check 14 holds the
# hypothesis's Evidence used: to the hits, and the earlier versions of a final audit were gated before.
warn_unlogged_citations() {
  ((HITS_OK && VK == K)) && [[ -f $D/kbs_evidence.md ]] || return 0
  local id ids=() unknown=()
  mapfile -t ids < <(grep -oE 'kbs:[a-z0-9][a-z0-9-]*[a-z0-9]' "$D/kbs_evidence.md" | LC_ALL=C sort -u)
  for id in "${ids[@]}"; do [[ ,$HITS, == *,"${id#kbs:}",* ]] || unknown+=("${id#kbs:}"); done
  ((${#unknown[@]})) || return 0
  printf '[WARN] %s: kbs_evidence.md cites %s, which no query logged for %s returned (cite as kbs:ID the pages a logged query of this version found: kernel-loop kbs get ID --log, or kbs query --log; name others bare)\n' \
    "$V" "$(printf 'kbs:%s ' "${unknown[@]}" | sed 's/ $//')" "$V"
}

# The prediction lines on stdin that cannot fail or cannot hold, each as SENSELESS_AWK says (none: no output).
senseless_predictions() {
  awk "$SENSELESS_AWK"'{ v = senseless($0); if (v != "") print v }'
}

# Returns 0 when text $1 holds only ASCII bytes.
ascii_only() {
  local LC_ALL=C
  [[ $1 != *[![:ascii:]]* ]]
}

# Returns 0 when a line of text $2 matches extended regex $1, as grep -Eq does: by bash's own matching where the
# text is ASCII, else by grep (how it treats other bytes, an encoding error say, is its own).
any_line_matches() {
  local line lines=()
  if ! ascii_only "$2"; then grep -Eq "$1" <<<"$2"; return; fi
  mapfile -t lines <<<"$2"
  for line in "${lines[@]}"; do [[ $line =~ $1 ]] && return 0; done
  return 1
}

# 14. hypothesis content: Version: names vK, a parsable prediction on duration, evidence ids that this
# version's logged queries returned (hypothesis.bats)
check_14_hypothesis_content() {
  ((HYP_OK)) || return 0
  local body preds senseless line id ids=() unknown=() ok=1 known=0 i lines=() verdicts=() pred_re
  local num='([0-9]+([.][0-9]*)?|[.][0-9]+)([eE][-+]?[0-9]+)?'
  pred_re="^[[:space:]]*([A-Za-z_][A-Za-z0-9_]*(#[0-9]+)?[[:space:]]*:[[:space:]]*)?[A-Za-z_][A-Za-z0-9_]*[[:space:]]*:[[:space:]]*([-+][[:space:]]*${num}[[:space:]]*%?|(<=|>=|==|<|>|=)[[:space:]]*-?${num}[[:space:]]*%?)[[:space:]]*\$"
  text_result 'body:Version:' "$D/hypothesis.txt"; body=$TEXT
  if [[ $body == *"$TODO_MARK"* ]]; then
    :  # check 9 names the TODO
  elif ! any_line_matches "(^|[^A-Za-z0-9_])$V([^0-9]|\$)" "$body"; then
    fail "$V: hypothesis.txt's Version: does not name $V: it says '$(head -c 60 <<<"${body//$'\n'/ }")'"; ok=0
  fi
  text_result 'body:Expected metric movement:' "$D/hypothesis.txt"; body=$TEXT
  # the lines that parse as predictions (as grep -E finds them), and what SENSELESS_AWK says of them: from the
  # scan of hypothesis.txt where the body is ASCII, else by grep and awk
  preds='' senseless=''
  if [[ -n ${SCAN[senseless]+x} ]] && ascii_only "$body"; then
    mapfile -t lines <<<"$body"
    mapfile -t verdicts <<<"${SCAN[senseless]}"
    for i in "${!lines[@]}"; do
      [[ ${lines[i]} =~ $pred_re ]] || continue
      preds+=${lines[i]}$'\n'
      [[ ${verdicts[i]:-} == +* ]] && senseless+=${verdicts[i]#+}$'\n'
    done
    preds=${preds%$'\n'} senseless=${senseless%$'\n'} known=1
  else
    preds=$(printf '%s\n' "$body" | grep -E "$pred_re")
  fi
  if [[ $body == *"$TODO_MARK"* && -z $preds ]]; then
    :
  elif [[ -z $preds ]]; then
    fail "$V: hypothesis.txt has no prediction that parses under Expected metric movement: (one per line, e.g. 'duration: -20%'; forms in references/hypothesis.md)"; ok=0
  elif { ((known)) || senseless=$(senseless_predictions <<<"$preds"); } && [[ -n $senseless ]]; then
    while IFS= read -r line; do fail "$V: hypothesis.txt's prediction $line"; done <<<"$senseless"; ok=0
  elif ! any_line_matches '^[[:space:]]*(duration|event_median_us)[[:space:]]*:[[:space:]]*[-+<>=]' "$preds"; then
    fail "$V: hypothesis.txt predicts nothing about duration: add a line such as 'duration: -15%' under Expected metric movement: (duration or event_median_us, without a kernel: a kernel's time does not count)"; ok=0
  fi
  text_result 'body:Evidence used:' "$D/hypothesis.txt"; body=$TEXT
  if ((HITS_OK)) && [[ $body != *"$TODO_MARK"* ]]; then
    while IFS= read -r id; do
      [[ -n ${id//[[:space:]]/} ]] || continue
      id=${id#"${id%%[![:space:]*-]*}"}; id=${id#kbs:}; id=${id#"${id%%[![:space:]]*}"}; id=${id%%[[:space:]]*}; id=${id%%[:,;.]}
      ids+=("${id:-(a line with no id)}")
    done <<<"$body"
    if ((${#ids[@]} == 0)); then
      fail "$V: Evidence used: names no KBS page id (one per line, as '- <page-id>')"; ok=0
    fi
    for id in "${ids[@]}"; do [[ ,$HITS, == *,"$id",* ]] || unknown+=("$id"); done
    if ((${#unknown[@]})); then
      fail "$V: Evidence used: cites ${unknown[*]}, which no query logged for $V returned: cite only pages your kernel-loop kbs queries found (log another query with kbs query --log)"; ok=0
    fi
  fi
  ((ok)) && pass "$V: hypothesis.txt names $V, predicts duration, and cites only logged hits"
  return 0
}

# 15. decisions frozen: vK passed its transition gate (a signed gate record), and its hypothesis.txt,
# kbs_evidence.md and kernel are unchanged since (sequence.bats)
check_15_frozen() {
  ((REC_OK)) || return 0
  local d="$OUT/v$1" bad
  if ! first_record gate "v$1"; then
    fail "v$1: records.log has no gate record for v$1: v$1 never passed its transition gate (current_iteration.txt edited by hand?); gate v$1 first"
    return
  fi
  if ((COUNT > 1)); then
    fail "v$1: records.log holds $COUNT gate records for v$1: a version passes its gate once (the state was rewound to re-gate it)"
    return
  fi
  changed_file "$FIRST" "$d"; bad=$CHANGED
  if [[ -n $bad ]]; then
    fail "v$1: v$1/$bad is missing or changed since v$1 passed its gate (records.log line ${REC_LINE[$FIRST]}): a passed version's decision is frozen; restore it"
  else
    pass "v$1: passed its gate, and its hypothesis, evidence and kernel are unchanged since"
  fi
}

# Every per-version check, in order; --structural stops after check 4.
# $1: version number; $2: 1 when hypothesis.txt is required.
check_version() {
  begin_version "$1" "$2" || return 0
  scan_version
  check_1_files
  check_2_hypothesis_headings
  check_3_kbs_headings
  check_4_kernel
  ((STRUCTURAL)) && return 0
  check_8_correctness
  check_9_templates_filled
  check_10_kernel_change
  warn_tuning_changes
  check_11_provenance
  check_12_kbs_queries
  warn_unlogged_citations
  check_14_hypothesis_content
  ((FINAL && $1 < K)) && check_15_frozen "$1"
  return 0
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

# The values of top-level keys $2... of the JSON object in file $1 into JV[key]: a number, or a string without
# its quotes (empty when absent, nested, or neither), as $(...) would hold it.  Tracks strings and nesting, so
# a key of the same name inside another object ("dims": {"iterations": ...}) never counts.  One awk process for
# all the keys: it prints, for each key in order, the number of lines of its value and then those lines.
declare -A JV=()
json_values() {
  local file=$1 key out=() i=0 c v
  shift
  JV=()
  mapfile -t out < <(awk -v want="$*" '
    { text = text $0 "\n" }
    END {
      nw = split(want, W, " "); for (j = 1; j <= nw; j++) wanted[W[j]] = 1
      depth = 0; n = length(text); key = ""; expect = 0; left = nw
      for (i = 1; i <= n && left > 0; i++) {
        c = substr(text, i, 1)
        if (c == "\"") {
          s = ""; i++
          while (i <= n) { c = substr(text, i, 1); if (c == "\\") { s = s substr(text, i, 2); i += 2; continue }
                           if (c == "\"") break; s = s c; i++ }
          if (expect && depth == 1) { if ((key in wanted) && !(key in got)) { got[key] = s; left-- } expect = 0; key = ""; continue }
          if (depth == 1) key = s
          continue
        }
        if (c == "{" || c == "[") { depth++; expect = 0; continue }
        if (c == "}" || c == "]") { depth--; continue }
        if (c == ":" && depth == 1 && key != "") { expect = 1; continue }
        if (c == ",") { key = ""; expect = 0; continue }
        if (expect && depth == 1 && c ~ /[-0-9]/) {
          v = ""; while (i <= n && substr(text, i, 1) ~ /[-0-9.eE+]/) { v = v substr(text, i, 1); i++ }
          if ((key in wanted) && !(key in got)) { got[key] = v; left-- }
          expect = 0; key = ""; i--
        }
      }
      for (j = 1; j <= nw; j++) {
        v = (W[j] in got) ? got[W[j]] : ""; sub(/\n+$/, "", v)
        m = (v == "") ? 0 : split(v, L, "\n"); print m
        for (k = 1; k <= m; k++) print L[k]
      }
    }' "$file" 2>/dev/null)
  for key; do
    c=${out[i]:-0} v=''
    [[ $c =~ ^[0-9]+$ ]] || c=0
    for ((i = i + 1; c > 0; c--, i++)); do v+=${out[i]}$'\n'; done
    JV[$key]=${v%$'\n'}
  done
}

# run.json's device, gpu and iterations into RJ[key], read once (json_values): run.json is what init recorded.
declare -A RJ=()
RJ_READ=0
read_run_json() {
  ((RJ_READ)) && return 0
  json_values "$OUT/run.json" device gpu iterations
  RJ=([device]=${JV[device]} [gpu]=${JV[gpu]} [iterations]=${JV[iterations]}) RJ_READ=1
}

# The run's final version N: the last signed finish record's version (an early finish) or extend
# record's iterations, else finish.json's "version" when the run has no records to read, else run.json's
# "iterations" (the planned vN).  Sets FINAL_N ('' when nothing says) and FINAL_WHY.
read_final_version() {
  local value='' i
  FINAL_N='' FINAL_WHY=''
  for ((i = REC_N; i >= 1; i--)); do
    case ${R[$i.step]:-} in
      finish) value=${R[$i.version]:-}; value=${value#v}
              FINAL_WHY="kernel-loop finish ended the run early (records.log line ${REC_LINE[$i]})"; break ;;
      extend) value=${R[$i.iterations]:-}
              FINAL_WHY="kernel-loop extend set the final version (records.log line ${REC_LINE[$i]})"; break ;;
    esac
  done
  if [[ -z $FINAL_WHY && $REC_N == 0 && -f $OUT/finish.json ]]; then
    json_values "$OUT/finish.json" version; value=${JV[version]#v}
    FINAL_WHY='finish.json: the run finished early'
  fi
  if [[ $value =~ ^(0|[1-9][0-9]{0,8})$ ]]; then FINAL_N=$value; return 0; fi
  FINAL_WHY=''
  if [[ -f $OUT/run.json ]]; then
    read_run_json; value=${RJ[iterations]}
    if [[ $value =~ ^(0|[1-9][0-9]{0,8})$ ]]; then FINAL_N=$value FINAL_WHY='run.json iterations'; fi
  fi
}

# Sets WANT to the version the signed gate records put the run at (one past the last gate record) and
# WANT_LINE to that record's line; returns 1 (WANT empty) when records.log holds no gate record.  Reads the
# records as loaded: verified, or (--structural) unverified.
signed_state() {
  WANT='' WANT_LINE=''
  latest_record gate '' || return 1
  WANT=$(( ${R[$LATEST.version]#v} + 1 )) WANT_LINE=${REC_LINE[$LATEST]}
}

restore_hint() {
  printf 'rebuild it from the signed gate records, never by hand: %s status %q --restore-state' "$(kloop_command)" "$OUT"
}

# Part of check 5: the state must be where the signed gate records put the run (one past the last version
# that passed its gate; v0 before the first gate), so a hand-edited current_iteration.txt cannot rewind the
# run to re-gate a version, nor skip one, and a deleted one is never re-created behind them.  Returns 1 on a
# failure (main then stops: a state the run is not at explains any drift or missing gate that follows).
records_agree_with_state() {
  ((REC_OK || STRUCTURAL)) || return 0
  if [[ -z $STATE ]]; then
    signed_state || return 0
    fail "current_iteration.txt is missing, but the signed gate records put the run at v$WANT (records.log line $WANT_LINE), so no gate re-creates it at v0: $(restore_hint)"
    return 1
  fi
  ((REC_OK)) || return 0
  if [[ $STATE == '?' ]]; then
    if signed_state; then
      fail "current_iteration.txt holds '${STATE_TEXT:0:40}', not a version name: the state is corrupt; the signed gate records put the run at v$WANT (records.log line $WANT_LINE): $(restore_hint)"
    else
      fail "current_iteration.txt holds '${STATE_TEXT:0:40}', not a version name: the state is corrupt; no gate has passed yet, so it should name v0: $(restore_hint)"
    fi
    return 1
  fi
  local want=0 line=''
  if signed_state; then want=$WANT line=" (records.log line $WANT_LINE)"; fi
  if [[ $STATE != "$want" ]]; then
    fail "current_iteration.txt names v$STATE, but the last signed gate record$line puts the run at v$want: the state was edited by hand or copied from elsewhere; $(restore_hint)"
    return 1
  fi
}

# 5. the state names vK (transition) or vN (final) (state.bats).  Sets RERUN (the state
# already names v(K+1)), DRIFT_LIMIT (check 6 looks beyond it) and NOTE.  Only the first
# v0 transition gate writes here, and never in --structural mode.
check_5_state() {
  RERUN=0 DRIFT_LIMIT=$K NOTE=''
  read_final_version
  if ((REC_OK)) && [[ -f $OUT/finish.json ]] && ! latest_record finish ''; then
    fail "finish.json has no signed finish record in records.log: only kernel-loop finish ends a run early"
  fi
  records_agree_with_state || return
  if ((FINAL && REC_OK)) && latest_record extend ''; then
    NOTE="the run was extended: ${R[$LATEST.note]:-final version v${R[$LATEST.iterations]:-?}} (records.log line ${REC_LINE[$LATEST]})"
  fi
  if [[ -n $FINAL_N ]] && ((FINAL && K != FINAL_N)); then
    fail "v$K is not the final version: the run's final version is v$FINAL_N ($FINAL_WHY); run the final audit on v$FINAL_N, or end the run at v$K with '$(kloop_command) finish $(printf %q "$OUT") --reason ...' first"
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
    if ((STRUCTURAL || DRY_RUN)); then
      pass "current_iteration.txt is absent: the first v0 transition gate creates it (--structural and --dry-run write nothing)"
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
    fail "current_iteration.txt holds '${STATE_TEXT:0:40}', not a version name: the state is corrupt; $(restore_hint)"
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
      fail "state drift: $name holds ${found[*]} but current_iteration.txt is at v$limit, where the signed gate records put the run: $name was started before v$limit passed its gate; stop and report it to the user, who decides what happens to those files"
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
    local plural=s
    [[ $FAILS == 1 ]] && plural=''
    printf 'gate: v%s FAILED: %d check%s\n' "$K" "$FAILS" "$plural"
    exit 1
  fi
  if ((FINAL && STRUCTURAL)); then
    printf 'gate: v%s passed (structural checks, final audit of v0..v%s)\n' "$K" "$K"
  elif ((FINAL)); then
    printf 'gate: v%s passed (final audit of v0..v%s)\n' "$K" "$K"
  elif ((STRUCTURAL)); then
    printf 'gate: v%s passed (structural checks, transition); current_iteration.txt not written\n' "$K"
  elif ((DRY_RUN)); then
    printf 'gate: v%s passed (dry run, transition); current_iteration.txt not written\n' "$K"
  elif ((RERUN)); then
    printf 'gate: v%s passed (transition, already recorded); current_iteration.txt stays v%s\n' "$K" "$((K + 1))"
  elif ! append_gate_record "$K"; then
    printf '%s: v%s passed but its gate record could not be appended to %s\n' "$PROG" "$K" "$OUT/$RECORDS" >&2
    exit 1
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
  FINAL=0 STRUCTURAL=0 DRY_RUN=0
  for arg in "$@"; do
    case $arg in
      -h | --help) usage; exit 0 ;;
    esac
  done
  for arg in "$@"; do
    case $arg in
      --final) FINAL=1 ;;
      --structural) STRUCTURAL=1 ;;
      --dry-run) DRY_RUN=1 ;;
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
# --structural and --dry-run only read: they take the lock shared, and only when the lock file exists
# (every state write is an atomic rename, so a reader never sees half a state file).
take_lock() {
  local lockfd mode=-x
  if ((STRUCTURAL || DRY_RUN)); then
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

# 13. the signed records: the key is there, records.log's chain and every signature verify, and
# ref.py and run.json are what init recorded (provenance.bats).  Sets REC_OK.  --structural reads the
# records without verifying them (it only needs the final version) and fails nothing here.
check_13_records() {
  REC_OK=0
  if ((STRUCTURAL)); then
    load_records 0 || true
    return 0
  fi
  if ! load_key; then fail "$KEY_ERR"; return 0; fi
  if ! load_records 1; then fail "$REC_ERR"; return 0; fi
  ((PREFETCHED)) || { prefetch_paths "$REC_N"; prefetch_digests; }
  if [[ ${R[1.step]:-} != init ]]; then
    fail "records.log does not start with an init record: start the run with kernel-loop init"; return 0
  fi
  if file_differs "$OUT/ref.py" "${R[1.ref]:-}"; then
    fail "ref.py changed after kernel-loop init recorded it (records.log line 1): restore it, or start a new run"; return 0
  fi
  if file_differs "$OUT/run.json" "${R[1.run]:-}"; then
    fail "run configuration changed during the run: run.json differs from what kernel-loop init recorded (records.log line 1): restore it, or start a new run"; return 0
  fi
  REC_OK=1
  pass "records.log: $REC_N signed records verify (key $KEY_ID); ref.py and run.json are as init recorded them"
}

main() {
  local j
  parse_args "$@"
  take_lock
  read_state
  RUN_DEVICE=''; [[ -f $OUT/run.json ]] && run_device  # read once: run.json is what init recorded
  check_13_records
  ((FAILS)) && check_7_advance_state  # no verified records: nothing else can be judged
  if [[ -f $OUT/run.json ]] && run_device && [[ $RUN_DEVICE == cpu ]]; then  # no profile, so no KBS queries or hypothesis: one line
    fail "v$K: this run uses the cpu test mode (run.json device cpu): the gate passes only a GPU run's versions, whose profile (and the kbs evidence and hypothesis drawn from it) needs a GPU run; correctness is all the cpu test mode checks (init a new run without --device cpu where a CUDA GPU is)"
    check_7_advance_state
  fi
  check_5_state
  ((FAILS)) && check_7_advance_state  # the state is not where the run is: every later check would follow from it
  check_6_drift "$DRIFT_LIMIT"
  if ((FINAL)); then
    for ((j = 0; j <= K; j++)); do check_version "$j" $((j < K)); done
  else
    for ((j = 0; j < K + RERUN; j++)); do check_15_frozen "$j"; done
    check_version "$K" 1
  fi
  check_7_advance_state
}

main "$@"
