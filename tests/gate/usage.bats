#!/usr/bin/env bats
# shellcheck shell=bats
# Command line: --help, usage errors (exit 2), path forms, output format.
bats_require_minimum_version 1.5.0
load test_helper

@test "--help explains every flag and exit code, exit 0" {
  run -0 gate --help
  for word in --final --structural --verbose --help 'Exit codes' GATE_LOCK_TIMEOUT \
    'leading zeros' 'whitespace' 'Re-running a passed gate'; do
    assert_output --partial "$word"
  done
  assert_line --regexp '^  0  '
  assert_line --regexp '^  1  '
  assert_line --regexp '^  2  '
}

@test "-h works anywhere on the line, even after a bad path" {
  run -0 gate /nonexistent -h
  assert_output --partial 'Usage:'
}

@test "no argument is a usage error" {
  run -2 --separate-stderr gate
  assert_equal "$output" ""
  assert_equal "${stderr_lines[0]}" "check_iteration_gate: missing the version directory (<out>/vK)"
}

@test "an unknown option is a usage error" {
  make_run
  run -2 --separate-stderr gate "$OUT/v0" --fast
  assert_equal "${stderr_lines[0]}" "check_iteration_gate: unknown option '--fast'"
}

@test "two directories are a usage error" {
  make_run
  make_version 1
  run -2 --separate-stderr gate "$OUT/v0" "$OUT/v1"
  assert_equal "$output" ""
  [[ $stderr == check_iteration_gate:* ]]
}

@test "a path that is not a directory is a usage error" {
  make_run
  run -2 --separate-stderr gate "$OUT/v0/kernel.py"
  [[ $stderr == *"is not a directory"* ]]
  run -2 gate "$OUT/v7"
}

@test "directory names that are not v<number> are usage errors" {
  make_run
  local name
  for name in v01 v00 v x1 v1a V1 v-1; do
    mkdir -p "$OUT/$name"
    run -2 --separate-stderr gate "$OUT/$name"
    [[ $stderr == *"not a version directory name"* ]]
  done
  [[ ! -e $OUT/current_iteration.txt ]]
}

@test "a valid v0 passes quietly with a one-line summary" {
  make_run
  run -0 --separate-stderr gate "$OUT/v0"
  assert_equal "$output" "$(printf 'note: created current_iteration.txt with v0\ngate: v0 passed (transition); current_iteration.txt -> v1')"
  assert_equal "$stderr" ""
}

@test "--verbose prints a [PASS] line for every check" {
  make_run
  run -0 gate "$OUT/v0" --verbose
  refute_line --partial '[FAIL]'
  local n
  n=$(grep -c '^\[PASS\]' <<<"$output")
  (( n >= 12 ))
  assert_line '[PASS] v0: the signed correctness (PASS) and profile records match v0 as it is now'
  assert_line '[PASS] no artifacts beyond v0'
}

@test "a failure prints [FAIL] lines and the count" {
  make_run
  rm "$OUT/v0/ncu_details.md" "$OUT/v0/kbs_queries.jsonl"
  run -1 gate "$OUT/v0"
  assert_line --partial '[FAIL] v0: missing or empty: ncu_details.md'
  assert_line --partial '[FAIL] v0: kbs_queries.jsonl is missing'
  assert_line --partial '[FAIL] v0: ncu_details.md changed after kernel-loop profile wrote it'
  assert_line 'gate: v0 FAILED: 3 checks'
}

@test "trailing slash, relative path and '.' all work" {
  make_run
  run -0 gate "$OUT/v0/"
  make_version 1
  cd "$OUT"
  run -0 gate v1//
  assert_line 'gate: v1 passed (transition); current_iteration.txt -> v2'
  make_version 2
  cd "$OUT/v2"
  run -0 gate .
  assert_equal "$(state)" v3
}

@test "an exported CDPATH does not redirect a relative path" {
  make_run
  mkdir -p "$BATS_TEST_TMPDIR/elsewhere/v0"
  cd "$OUT"
  CDPATH="$BATS_TEST_TMPDIR/elsewhere" run -0 gate v0
  assert_equal "$(state)" v1
  [[ ! -e "$BATS_TEST_TMPDIR/elsewhere/.gate.lock" ]]
}

@test "a run directory path with spaces and odd characters works" {
  OUT="$BATS_TEST_TMPDIR/odd dir [1] & 'q'"
  mkdir -p "$OUT"
  make_run
  run -0 gate "$OUT/v0"
  assert_equal "$(state)" v1
}
