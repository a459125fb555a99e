#!/usr/bin/env bats
# shellcheck shell=bats
# Whole runs: v0 -> v1 -> v2 -> final, re-running a passed gate, concurrent gates.
bats_require_minimum_version 1.5.0
load test_helper

@test "v0 -> v1 -> v2 -> final audit" {
  make_run
  run -0 gate "$OUT/v0"
  assert_line 'gate: v0 passed (transition); current_iteration.txt -> v1'
  make_version 1
  run -0 gate "$OUT/v1"
  assert_line 'gate: v1 passed (transition); current_iteration.txt -> v2'
  make_version 2
  run -0 gate "$OUT/v2" --final
  assert_output 'gate: v2 passed (final audit of v0..v2)'
  assert_equal "$(state)" v2
}

@test "the final audit re-checks every earlier version" {
  advance_to 2
  printf 'BLOCK = 1024\n' >>"$OUT/v0/kernel.py"
  run -1 gate "$OUT/v2" --final
  assert_line --partial 'v0: kernel.py changed after correctness ran'
  assert_line --partial 'v0: kernel.py changed after profile ran'
  assert_line --partial 'v0: v0/kernel.py is missing or changed since v0 passed its gate'
  assert_line 'gate: v2 FAILED: 3 checks'
}

@test "v0's hypothesis rewritten after v1 was measured fails the final audit, naming the file" {
  advance_to 2
  sed -i 's/^duration: -20%$/duration: -2%/' "$OUT/v0/hypothesis.txt"
  run gate "$OUT/v2" --final
  assert_only_failure 'v0: v0/hypothesis.txt is missing or changed since v0 passed its gate'
  rm -rf "$OUT" && mkdir -p "$OUT"
  advance_to 2
  printf '\nMore evidence.\n' >>"$OUT/v1/kbs_evidence.md"
  run gate "$OUT/v2" --final
  assert_only_failure 'v1: v1/kbs_evidence.md is missing or changed since v1 passed its gate'
}

@test "a hand-edited current_iteration.txt cannot skip a version's gate" {
  make_run
  make_version 1
  printf 'v1\n' >"$OUT/current_iteration.txt"
  run gate "$OUT/v1"
  assert_only_failure 'current_iteration.txt names v1, but the last signed gate record puts the run at v0'
  assert_line --partial 'status '"$(printf %q "$OUT")"' --restore-state'
  assert_equal "$(state)" v1
  make_version 2
  printf 'v2\n' >"$OUT/current_iteration.txt"
  run gate "$OUT/v2" --final
  assert_only_failure 'current_iteration.txt names v2, but the last signed gate record puts the run at v0'
}

@test "a gate record that skips a version: check 15 names the version that never passed its gate" {
  make_run
  make_version 1
  sign_record gate v1 result=passed "files=hypothesis.txt:$(sha "$OUT/v1/hypothesis.txt")"
  make_version 2
  printf 'v2\n' >"$OUT/current_iteration.txt"  # where the last gate record puts the run
  run gate "$OUT/v2"
  assert_only_failure 'v0: records.log has no gate record for v0: v0 never passed its transition gate'
}

@test "a passed transition gate appends a signed gate record; a re-run appends none" {
  make_run
  run -0 gate "$OUT/v0"
  assert_equal "$(tail -n 1 "$OUT/records.log" | cut -f4,5)" $'step=gate\tversion=v0'
  local n
  n=$(wc -l <"$OUT/records.log")
  run -0 gate "$OUT/v0"
  assert_equal "$(wc -l <"$OUT/records.log")" "$n"
  run -0 gate "$OUT/v0" --structural
  assert_equal "$(wc -l <"$OUT/records.log")" "$n"
}

@test "the final audit needs every version folder" {
  advance_to 2
  rm -r "$OUT/v1"
  run -1 gate "$OUT/v2" --final
  assert_line --partial '[FAIL] v1: the folder v1 is missing'
  assert_line --partial '[FAIL] v2: cannot compare with v1'
}

@test "the final audit before the last transition fails on the state" {
  advance_to 1
  make_version 2
  run -1 gate "$OUT/v2" --final
  assert_line --partial "[FAIL] current_iteration.txt names 'v1', not v2"
  assert_equal "$(state)" v1
}

@test "re-running a passed gate passes idempotently and writes nothing" {
  advance_to 1
  # next_version has copied the kernel into v1 already; that is not drift
  local before
  before=$(stat -c '%i %.9Y' "$OUT/current_iteration.txt")  # inode and mtime to the nanosecond
  run -0 gate "$OUT/v0"
  assert_line 'gate: v0 passed (transition, already recorded); current_iteration.txt stays v1'
  assert_equal "$(stat -c '%i %.9Y' "$OUT/current_iteration.txt")" "$before"
  run -0 gate "$OUT/v0" --verbose
  assert_line '[PASS] current_iteration.txt already names v1; re-checking v0 without writing'
  assert_line '[PASS] no artifacts beyond v1'
}

@test "re-running a passed gate whose version has since broken fails, state untouched" {
  advance_to 1
  printf 'oops\n' >>"$OUT/v0/ncu_details.md"
  run gate "$OUT/v0"
  assert_only_failure 'v0: ncu_details.md changed after kernel-loop profile wrote it'
  assert_equal "$(state)" v1
}

@test "a re-run still reports drift beyond v(K+1)" {
  advance_to 1
  mkdir "$OUT/v2"
  printf 'x = 1\n' >"$OUT/v2/kernel.py"
  run gate "$OUT/v0"
  assert_only_failure 'state drift: v2 holds kernel.py but current_iteration.txt is at v1'
}

@test "two gates at once on the same version leave a valid state" {
  make_run
  "$GATE" "$OUT/v0" >"$BATS_TEST_TMPDIR/a" 3>&- &
  local a=$!
  "$GATE" "$OUT/v0" >"$BATS_TEST_TMPDIR/b" 3>&- &
  local b=$!
  wait "$a"
  wait "$b"
  assert_equal "$(state)" v1
  run cat "$BATS_TEST_TMPDIR/a" "$BATS_TEST_TMPDIR/b"
  assert_line 'gate: v0 passed (transition); current_iteration.txt -> v1'
  assert_line 'gate: v0 passed (transition, already recorded); current_iteration.txt stays v1'
}

@test "six concurrent gates on one version: exactly one advances the state" {
  make_run
  local pids=() i
  for i in 1 2 3 4 5 6; do
    "$GATE" "$OUT/v0" >"$BATS_TEST_TMPDIR/out$i" 3>&- &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i"; done
  assert_equal "$(state)" v1
  run -0 grep -h '^gate:' "$BATS_TEST_TMPDIR"/out?
  assert_equal "$(grep -c -- '-> v1$' <<<"$output")" 1
  assert_equal "$(grep -c 'stays v1$' <<<"$output")" 5
  run -0 find "$OUT" -maxdepth 1 -name '.current_iteration.*'
  assert_output ''
}

@test "a rewound state cannot re-gate a passed version, and a version measured early fails" {
  advance_to 2
  sed -i 's/^duration: -20%$/duration: -2%/' "$OUT/v1/hypothesis.txt"
  printf 'v1\n' >"$OUT/current_iteration.txt"
  mv "$OUT/v2" "$BATS_TEST_TMPDIR/v2"
  run gate "$OUT/v1"
  assert_line --partial 'current_iteration.txt names v1, but the last signed gate record (records.log line'
  assert_line --partial 'puts the run at v2: the state was edited by hand'
  assert_equal "$(grep -c $'step=gate\tversion=v1' "$OUT/records.log")" 1
  rm -rf "$OUT" && mkdir -p "$OUT"
  make_run
  make_version 1  # v1 measured before v0 passed its gate (v0's hypothesis not yet frozen)
  mv "$OUT/v1" "$BATS_TEST_TMPDIR/early-v1"
  run -0 gate "$OUT/v0"
  mv "$BATS_TEST_TMPDIR/early-v1" "$OUT/v1"
  run gate "$OUT/v1"
  assert_line --partial 'v1: its correctness record (records.log line'
  assert_line --partial 'comes before v0 passed its gate'
}
