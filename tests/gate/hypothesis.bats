#!/usr/bin/env bats
# shellcheck shell=bats
# Check 2 (check_2_hypothesis_headings: hypothesis.txt headings) and the hypothesis half of
# check 9 (check_9_templates_filled: filled, no TODO).
bats_require_minimum_version 1.5.0
load test_helper

@test "a filled hypothesis passes checks 2 and 9" {
  make_run
  run -0 gate "$OUT/v0" --verbose
  assert_line '[PASS] v0: hypothesis.txt has every heading in order'
  assert_line '[PASS] v0: every hypothesis.txt heading has content'
  assert_line '[PASS] v0: hypothesis.txt has no TODO(kernel-loop)'
}

@test "missing or empty hypothesis.txt fails in transition mode" {
  make_run
  rm "$OUT/v0/hypothesis.txt"
  run gate "$OUT/v0" --structural
  assert_only_failure 'v0: hypothesis.txt is missing or empty'
  : >"$OUT/v0/hypothesis.txt"
  run gate "$OUT/v0" --structural
  assert_only_failure 'v0: hypothesis.txt is missing or empty'
}

@test "each missing heading is named" {
  make_run
  local h
  cp "$OUT/v0/hypothesis.txt" "$BATS_TEST_TMPDIR/hyp"
  for h in 'Version:' 'Current evidence:' 'Decision link:' 'Single change:' 'Rationale:' \
    'Expected metric movement:' 'Risk:' 'Evidence used:' 'Decision rule:'; do
    grep -vxF -- "$h" "$BATS_TEST_TMPDIR/hyp" >"$OUT/v0/hypothesis.txt"
    run gate "$OUT/v0" --structural
    assert_only_failure "hypothesis.txt lacks the heading '$h'"
  done
}

@test "headings out of order fail" {
  make_run
  # swap Risk: and Rationale: (with their bodies)
  awk '/^Rationale:$/ { r = 1 } /^Expected metric movement:$/ { r = 0 }
       r { held = held $0 "\n"; next }
       /^Evidence used:$/ { printf "%s", held } { print }' "$OUT/v0/hypothesis.txt" >"$BATS_TEST_TMPDIR/h"
  mv "$BATS_TEST_TMPDIR/h" "$OUT/v0/hypothesis.txt"
  run gate "$OUT/v0" --structural
  assert_only_failure "hypothesis.txt lacks the heading 'Expected metric movement:'"
}

@test "a heading with its value on the same line fails" {
  make_run
  sed -i '1,2c Version: v0' "$OUT/v0/hypothesis.txt"
  run gate "$OUT/v0" --structural
  assert_only_failure "hypothesis.txt lacks the heading 'Version:'"
}

@test "trailing spaces and CRLF line ends after a heading are tolerated" {
  make_run
  sed -i 's/^Risk:$/Risk:   /; s/$/\r/' "$OUT/v0/hypothesis.txt"
  measure 0
  run -0 gate "$OUT/v0"
}

@test "an empty heading body fails check 9, not the structural gate" {
  make_run
  sed -i '/^Risk:$/{n;d}' "$OUT/v0/hypothesis.txt"
  run gate "$OUT/v0"
  assert_only_failure 'v0: hypothesis.txt has empty heading(s): Risk:'
  run -0 gate "$OUT/v0" --structural
}

@test "blank lines do not count as a body; the last heading needs one too" {
  make_run
  sed -i '/^Keep the change/d' "$OUT/v0/hypothesis.txt"
  printf '   \n\n' >>"$OUT/v0/hypothesis.txt"
  run gate "$OUT/v0"
  assert_only_failure 'empty heading(s): Decision rule:'
}

@test "a TODO(kernel-loop) marker fails check 9 with its line number" {
  make_run
  sed -i 's/^Double BLOCK in kernel.py.$/TODO(kernel-loop)/' "$OUT/v0/hypothesis.txt"
  run gate "$OUT/v0"
  assert_only_failure 'v0: hypothesis.txt still has TODO(kernel-loop) on line(s) 9'
  run -0 gate "$OUT/v0" --structural
}

@test "final mode: v0..vN-1 need a hypothesis, vN does not" {
  advance_to 1
  rm "$OUT/v1/hypothesis.txt"
  run -0 gate "$OUT/v1" --final
  rm "$OUT/v0/hypothesis.txt"
  run -1 gate "$OUT/v1" --final
  assert_line --partial 'v0: hypothesis.txt is missing or empty'
  assert_line --partial 'v0: v0/hypothesis.txt is missing or changed since v0 passed its gate'
  assert_line 'gate: v1 FAILED: 2 checks'
}

@test "final mode: a hypothesis present in vN is checked" {
  advance_to 1
  sed -i '/^Rationale:$/d' "$OUT/v1/hypothesis.txt"
  run gate "$OUT/v1" --final
  assert_only_failure "v1: hypothesis.txt lacks the heading 'Rationale:'"
}

@test "a body that is only filler fails check 9: TBD, n/a, -, ., todo, a word too short" {
  local filler
  for filler in TBD 'n/a' '-' '.' todo 'None.' 'ok' 'TBD TBD n/a'; do
    rm -rf "$OUT" && mkdir -p "$OUT"
    make_run
    awk -v f="$filler" '/^Risk:$/ { print; print f; skip = 1; next } /^Evidence used:$/ { skip = 0 } !skip' \
      "$OUT/v0/hypothesis.txt" >"$BATS_TEST_TMPDIR/h" && cp "$BATS_TEST_TMPDIR/h" "$OUT/v0/hypothesis.txt"
    run gate "$OUT/v0"
    assert_only_failure 'v0: hypothesis.txt has empty heading(s): Risk:'
  done
}

@test "Version: must name this version" {
  make_run
  sed -i '0,/^v0$/s//v7: kernel.py/' "$OUT/v0/hypothesis.txt"
  run gate "$OUT/v0"
  assert_only_failure "v0: hypothesis.txt's Version: does not name v0: it says 'v7: kernel.py'"
  sed -i 's/^v7: kernel.py$/v0: kernel.py (sha256 ...)/' "$OUT/v0/hypothesis.txt"
  run -0 gate "$OUT/v0"
}

@test "at least one prediction must parse, and one must be on duration" {
  make_run
  sed -i '/^duration: -20%$/d' "$OUT/v0/hypothesis.txt"
  run gate "$OUT/v0"
  assert_only_failure 'v0: hypothesis.txt predicts nothing about duration'
  rm -rf "$OUT" && mkdir -p "$OUT"
  make_run
  sed -i 's/^duration: -20%$/duration should drop a lot/; s/^dram_throughput_pct: +15$/more bandwidth/; s/^registers_per_thread: <= 64$/fewer registers/' \
    "$OUT/v0/hypothesis.txt"
  run gate "$OUT/v0"
  assert_only_failure 'v0: hypothesis.txt has no prediction that parses under Expected metric movement:'
}

@test "a prediction may name a kernel, but the duration one must not" {
  make_run
  # the kernel's line parses (the failure is not "no prediction that parses"), but a kernel's time is not
  # the call's: no prediction is on duration
  sed -i 's/^duration: -20%$/attn_fwd:duration: -20%/; s/^dram_throughput_pct:/gemm#x:dram_throughput_pct:/; s/^registers_per_thread:/a:b:registers_per_thread:/' \
    "$OUT/v0/hypothesis.txt"
  run gate "$OUT/v0"
  assert_only_failure 'v0: hypothesis.txt predicts nothing about duration'
  # a label is a word, optionally with #N: anything else does not parse
  sed -i 's/^attn_fwd:duration: -20%$/attn-fwd:duration: -20%/' "$OUT/v0/hypothesis.txt"
  run gate "$OUT/v0"
  assert_only_failure 'v0: hypothesis.txt has no prediction that parses under Expected metric movement:'
  sed -i 's/^attn-fwd:duration: -20%$/duration: -20%/; s/^gemm#x:/attn_fwd:/; s/^a:b:registers_per_thread: <= 64$/gemm#2 : registers_per_thread: <= 128/' \
    "$OUT/v0/hypothesis.txt"
  run -0 gate "$OUT/v0" --verbose
  assert_line '[PASS] v0: hypothesis.txt names v0, predicts duration, and cites only logged hits'
  run grep -c '^attn_fwd:dram_throughput_pct: +15$\|^gemm#2 : registers_per_thread: <= 128$' "$OUT/v0/hypothesis.txt"
  assert_output 2
}

@test "a NUL byte in a text file fails check 1: the prediction after it would be judged on what comes before" {
  make_run
  # 'duration: >= 0' cannot fail; with a NUL after it, a line read up to the NUL would look like it
  sed -i 's/^duration: -20%$/duration: >= 0\x00: -20%/' "$OUT/v0/hypothesis.txt"
  run grep -c -a -P '\x00' "$OUT/v0/hypothesis.txt"
  assert_output 1
  run -1 gate "$OUT/v0"
  assert_line '[FAIL] v0: hypothesis.txt: holds a NUL byte; the loop'"'"'s text files are plain text (write the file again without it)'
  sed -i 's/\x00: -20%$//' "$OUT/v0/hypothesis.txt"
  sed -i 's/^duration: >= 0$/duration: -20%/' "$OUT/v0/hypothesis.txt"
  printf 'note\0\n' >>"$OUT/v0/kbs_evidence.md"
  run -1 gate "$OUT/v0" --structural
  assert_line --partial 'v0: kbs_evidence.md: holds a NUL byte'
}

@test "a prediction that cannot fail or cannot hold fails check 14, exponents included" {
  make_run
  local line
  for line in 'duration: >= 0' 'duration: > -1' 'duration: <= -5' 'duration: < 0' 'duration: -100%'; do
    sed -i "s/^duration: .*\$/$line/" "$OUT/v0/hypothesis.txt"
    run gate "$OUT/v0"
    assert_only_failure "v0: hypothesis.txt's prediction '$line' cannot"
  done
  sed -i 's/^duration: .*$/duration: -20%/' "$OUT/v0/hypothesis.txt"
  for line in 'dram_throughput_pct: +1e3' 'dram_throughput_pct: <= 100' 'dram_throughput_pct: < 1.01E2' \
    'dram_throughput_pct: >= 101'; do
    sed -i "s/^dram_throughput_pct: .*\$/$line/" "$OUT/v0/hypothesis.txt"
    run gate "$OUT/v0"
    assert_only_failure "v0: hypothesis.txt's prediction '$line' cannot"
  done
  # "not up" / "not down" can fail, a bound at 0 can hold, and an exponent parses
  sed -i 's/^dram_throughput_pct: .*$/dram_throughput_pct: +1.5e1/; s/^duration: .*$/duration: -0%/; s/^registers_per_thread: .*$/registers_per_thread: <= 0/' \
    "$OUT/v0/hypothesis.txt"
  run -0 gate "$OUT/v0" --verbose
  assert_line '[PASS] v0: hypothesis.txt names v0, predicts duration, and cites only logged hits'
}
