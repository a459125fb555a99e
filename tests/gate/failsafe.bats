#!/usr/bin/env bats
# shellcheck shell=bats
# Proof that the suite can fail.
#  - "failsafe: must fail" is a test that fails on purpose; it is skipped unless
#    BATS_RUN_FAILSAFE=1, so the suite stays green while the failure path can be
#    shown on demand: BATS_RUN_FAILSAFE=1 bats tests/gate/failsafe.bats reports 1 failure.
#  - the other tests run the real tests against sabotaged copies of the gate and
#    require them to fail.
bats_require_minimum_version 1.5.0
load test_helper

BATS_BIN="$REPO_ROOT/node_modules/bats/bin/bats"

@test "failsafe: must fail (skipped unless BATS_RUN_FAILSAFE=1)" {
  [[ ${BATS_RUN_FAILSAFE:-0} == 1 ]] || skip 'set BATS_RUN_FAILSAFE=1 to see this test fail'
  make_run
  rm "$OUT/v0/correctness.md"
  run -0 gate "$OUT/v0"
}

# sabotage <sed expression>: a copy of the gate with one edit, in $SABOTAGED
sabotage() {
  SABOTAGED="$BATS_TEST_TMPDIR/gate copy/check_iteration_gate.sh"
  mkdir -p "${SABOTAGED%/*}"
  sed "$1" "$GATE" >"$SABOTAGED"
  chmod +x "$SABOTAGED"
  ! cmp -s "$GATE" "$SABOTAGED"
}

@test "a gate that never counts failures is caught by correctness.bats" {
  # shellcheck disable=SC2016  # sed program, not shell
  sabotage 's/FAILS=\$((FAILS + 1)); //'
  # one of its tests is enough to show it (the whole file ran each of its 11 tests under the sabotage)
  GATE_UNDER_TEST=$SABOTAGED run -1 "$BATS_BIN" --tap -f "fails with 'correctness has not passed'" \
    "$BATS_TEST_DIRNAME/correctness.bats"
  assert_line --regexp "^not ok .*fails with 'correctness has not passed'"
}

@test "a gate that skips the whitespace/comment normalisation is caught by kernel.bats" {
  # shellcheck disable=SC2016  # sed program, not shell
  sabotage 's/^normalise_kernel() {$/normalise_kernel() { cat -- "$1"; return/'
  GATE_UNDER_TEST=$SABOTAGED run -1 "$BATS_BIN" --tap -f 'comment' "$BATS_TEST_DIRNAME/kernel.bats"
  assert_line --regexp '^not ok .*comment'
}

@test "a gate that writes the state on failure is caught by state.bats" {
  # shellcheck disable=SC2016  # sed program, not shell
  sabotage 's/^  if ((FAILS)); then$/  if ((FAILS)); then write_state $((K + 1));/'
  GATE_UNDER_TEST=$SABOTAGED run -1 "$BATS_BIN" --tap -f 'does not touch' "$BATS_TEST_DIRNAME/state.bats"
  assert_line --regexp '^not ok '
}

@test "a gate whose --structural mode writes the state is caught by state.bats" {
  # shellcheck disable=SC2016  # sed program, not shell
  sabotage 's/^  elif ((STRUCTURAL)); then$/  elif ((STRUCTURAL)) \&\& write_state $((K + 1)); then/'
  GATE_UNDER_TEST=$SABOTAGED run -1 "$BATS_BIN" --tap -f 'read-only' "$BATS_TEST_DIRNAME/state.bats"
  assert_line --regexp '^not ok .*read-only'
}
