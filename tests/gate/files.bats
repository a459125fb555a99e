#!/usr/bin/env bats
# shellcheck shell=bats
# Check 1 (check_1_files): correctness.md, ncu_summary.md, ncu_details.md, kbs_evidence.md exist and are non-empty.
bats_require_minimum_version 1.5.0
load test_helper

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
