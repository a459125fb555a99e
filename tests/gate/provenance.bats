#!/usr/bin/env bats
# shellcheck shell=bats
# Check 11 (check_11_provenance): measured.sha256 lists and matches the measured files; run.json stays fixed.
bats_require_minimum_version 1.5.0
load test_helper

@test "a complete, matching manifest passes; extra entries and binary markers are fine" {
  make_run
  printf '{"schema": 1, "result": "PASS"}\n' >"$OUT/v0/correctness.json"
  (cd "$OUT/v0" && sha256sum -b correctness.json >>measured.sha256)
  run -0 gate "$OUT/v0" --verbose
  assert_line '[PASS] v0: measured.sha256 lists and matches every measured file'
}

@test "a missing manifest fails; structural mode skips it" {
  make_run
  rm "$OUT/v0/measured.sha256"
  run gate "$OUT/v0"
  assert_only_failure 'v0: measured.sha256 is missing'
  run -0 gate "$OUT/v0" --structural
}

@test "a kernel edited after measuring is named" {
  make_run
  printf '# tweak\nBLOCK = 512\n' >>"$OUT/v0/kernel.py"
  run gate "$OUT/v0"
  assert_only_failure 'v0: kernel.py changed after it was measured: re-run correctness and profiling'
}

@test "an edited profile file asks for profiling again" {
  make_run
  printf 'extra\n' >>"$OUT/v0/ncu_summary.md"
  run gate "$OUT/v0"
  assert_only_failure 'v0: ncu_summary.md changed after it was measured: re-run profiling'
}

@test "every required entry must be listed" {
  make_run
  local f
  cp "$OUT/v0/measured.sha256" "$BATS_TEST_TMPDIR/m"
  for f in kernel.py correctness.md ncu_summary.md ncu_details.md ../run.json; do
    grep -v "  $f\$" "$BATS_TEST_TMPDIR/m" >"$OUT/v0/measured.sha256"
    run gate "$OUT/v0"
    assert_only_failure "v0: measured.sha256 does not list $f"
  done
}

@test "a listed file that disappeared, and a malformed line, fail" {
  make_run
  printf '{}\n' >"$OUT/v0/ncu.json"
  (cd "$OUT/v0" && sha256sum ncu.json >>measured.sha256)
  rm "$OUT/v0/ncu.json"
  run gate "$OUT/v0"
  assert_only_failure 'v0: ncu.json is listed in measured.sha256 but missing'
  make_run
  printf 'not-a-hash  kernel.py\n' >>"$OUT/v0/measured.sha256"
  run gate "$OUT/v0"
  assert_only_failure 'measured.sha256 has 1 malformed line(s)'
}

@test "run.json edited after measuring: run configuration changed" {
  advance_to 1
  write_run_json 7
  run -1 gate "$OUT/v1"
  assert_line --partial '[FAIL] v1: run configuration changed during the run: ../run.json changed after v1 was measured'
  assert_equal "$(state)" v1
}

@test "v1 measured under a different run.json than v0 fails, also in final mode" {
  advance_to 1
  write_run_json 7
  measure 1
  run gate "$OUT/v1"
  assert_only_failure 'v1: run configuration changed during the run: v1 measured a different run.json than v0'
  run -1 gate "$OUT/v1" --final
  assert_line --partial '[FAIL] v0: run configuration changed during the run'
  assert_line --partial '[FAIL] v1: run configuration changed during the run: v1 measured a different run.json than v0'
}

@test "v0 without a run.json entry leaves later versions without a baseline" {
  advance_to 1
  grep -v 'run.json' "$OUT/v0/measured.sha256" >"$BATS_TEST_TMPDIR/m"
  mv "$BATS_TEST_TMPDIR/m" "$OUT/v0/measured.sha256"
  run gate "$OUT/v1"
  assert_only_failure 'v0/measured.sha256 records no ../run.json'
}

@test "manifest paths that are absolute or leave the run directory fail" {
  local outside="$BATS_TEST_TMPDIR/outside.txt"
  printf 'not measured here\n' >"$outside"
  make_run
  printf '%s  %s\n' "$(sha256sum <"$outside" | cut -c1-64)" "$outside" >>"$OUT/v0/measured.sha256"
  run gate "$OUT/v0"
  assert_only_failure "v0: measured.sha256 lists '$outside', outside the run directory"
  make_run
  (cd "$OUT/v0" && sha256sum ../../outside.txt >>measured.sha256)
  run gate "$OUT/v0"
  assert_only_failure "v0: measured.sha256 lists '../../outside.txt', outside the run directory"
  make_run
  (cd "$OUT/v0" && sha256sum ../ref.py >>measured.sha256)
  run -0 gate "$OUT/v0"
}
