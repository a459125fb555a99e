#!/usr/bin/env bats
# shellcheck shell=bats
# Check 8 (check_8_correctness): correctness.md records a passing Result.
bats_require_minimum_version 1.5.0
load test_helper

set_correctness() {
  printf '# Correctness - v0\n\n%s\n' "$@" >"$OUT/v0/correctness.md"
  measure 0
}

@test "passing Result forms are accepted" {
  make_run
  local form
  # shellcheck disable=SC2016  # literal backticks
  for form in '| Result | PASS |' '| Result | **PASS** |' '|Result|ALL PASS|' '| **Result** | `PASS` |' \
    'Result: PASS' 'Result: ALL PASS' '**Result:** PASS' '- Result: **PASS**' 'result: PASS'; do
    set_correctness "$form"
    run -0 gate "$OUT/v0" --dry-run --verbose
    assert_line '[PASS] v0: correctness.md records PASS'
  done
}

@test "a FAIL result fails with 'correctness has not passed'" {
  make_run
  set_correctness '| Result | **FAIL** |'
  run gate "$OUT/v0"
  assert_only_failure 'v0: correctness has not passed (Result is FAIL in correctness.md)'
  run -0 gate "$OUT/v0" --structural
}

@test "other values, an empty value or no Result line fail" {
  make_run
  local form
  for form in 'Result: PASSED' 'Result: pass' '| Result | |' 'Result: PASS (2 of 3 shapes)'; do
    set_correctness "$form"
    run gate "$OUT/v0"
    assert_only_failure 'correctness has not passed'
  done
  set_correctness 'All outputs PASS' '| Results | PASS |'
  run gate "$OUT/v0"
  assert_only_failure 'correctness has not passed (no Result line in correctness.md)'
}

@test "every Result line must pass" {
  make_run
  set_correctness '| Result | PASS |' '' 'Result: FAIL'
  run gate "$OUT/v0"
  assert_only_failure 'Result is FAIL'
}

@test "a Result inside a code fence or an indented code block does not count" {
  make_run
  set_correctness '| Result | FAIL |' '' '```' 'Result: PASS' '```'
  run gate "$OUT/v0"
  assert_only_failure 'Result is FAIL'
  make_run
  set_correctness 'Max error too large.' '' '~~~text' '| Result | PASS |' '~~~' '' '    Result: PASS' '' '	Result: PASS'
  run gate "$OUT/v0"
  assert_only_failure 'correctness has not passed (no Result line in correctness.md)'
}

@test "a FAIL row is not rescued by a later PASS row" {
  make_run
  set_correctness '| Result | FAIL |' '|---|---|' '| Result | PASS |'
  run gate "$OUT/v0"
  assert_only_failure 'Result is FAIL'
}
