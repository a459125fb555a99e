#!/usr/bin/env bats
# shellcheck shell=bats
# Check 1 (check_1_files): correctness.md, ncu_summary.md, ncu_details.md, kbs_evidence.md exist and are non-empty.
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

# --- check 1: the measured and written files ---------------------------------------------------------------
@test "all four files present: check 1 passes" {
  make_run
  run -0 gate "$OUT/v0" --verbose
  assert_line '[PASS] v0: correctness.md, ncu_summary.md, ncu_details.md, kbs_evidence.md present'
}

@test "each missing file is named (structural mode isolates check 1)" {
  make_run
  local f
  for f in correctness.md ncu_summary.md ncu_details.md kbs_evidence.md; do
    mv "$OUT/v0/$f" "$OUT/v0/$f.bak"
    run gate "$OUT/v0" --structural
    assert_only_failure "v0: missing or empty: $f"
    mv "$OUT/v0/$f.bak" "$OUT/v0/$f"
  done
  run -0 gate "$OUT/v0" --structural
}

@test "an empty file fails like a missing one" {
  make_run
  : >"$OUT/v0/ncu_summary.md"
  run gate "$OUT/v0" --structural
  assert_only_failure 'v0: missing or empty: ncu_summary.md'
}

@test "a directory in place of a file fails" {
  make_run
  rm "$OUT/v0/ncu_details.md"
  mkdir "$OUT/v0/ncu_details.md"
  run gate "$OUT/v0" --structural
  assert_only_failure 'missing or empty: ncu_details.md'
}

@test "several missing files are listed on one line" {
  make_run
  rm "$OUT/v0/correctness.md" "$OUT/v0/ncu_summary.md"
  run gate "$OUT/v0" --structural
  assert_only_failure 'missing or empty: correctness.md ncu_summary.md'
}
