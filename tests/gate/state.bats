#!/usr/bin/env bats
# shellcheck shell=bats
# Checks 5-7 (check_5_state, check_6_drift, check_7_advance_state): current_iteration.txt,
# state drift, who writes the state (--structural never does); the lock.
bats_require_minimum_version 1.5.0
load test_helper

@test "the first v0 gate creates the state and advances it to v1" {
  make_run
  [[ ! -e $OUT/current_iteration.txt ]]
  run -0 gate "$OUT/v0"
  assert_line 'note: created current_iteration.txt with v0'
  assert_equal "$(state)" v1
}

@test "a failing first v0 gate leaves the state at v0" {
  make_run
  rm "$OUT/v0/ncu_summary.md"
  run -1 gate "$OUT/v0"
  assert_equal "$(state)" v0
  run -1 gate "$OUT/v0"
  refute_line --partial 'note:'
}

@test "a failing gate does not touch an existing state file" {
  advance_to 1
  rm "$OUT/v1/correctness.md"
  local before
  before=$(stat -c '%i %.9Y %s' "$OUT/current_iteration.txt")  # inode and mtime to the nanosecond
  run -1 gate "$OUT/v1"
  assert_equal "$(stat -c '%i %.9Y %s' "$OUT/current_iteration.txt")" "$before"
  assert_equal "$(state)" v1
}

@test "a missing state for K > 0 fails" {
  make_run
  make_version 1
  run gate "$OUT/v1"
  assert_only_failure 'current_iteration.txt is missing: run the gate on v0 first'
  [[ ! -e $OUT/current_iteration.txt ]]
}

@test "a deleted state is never re-created behind the signed gate records" {
  advance_to 2
  "$GATE" "$OUT/v2" >/dev/null
  rm "$OUT/current_iteration.txt"
  local k
  for k in 0 1 2 3; do
    [[ -d $OUT/v$k ]] || mkdir "$OUT/v$k"
    run gate "$OUT/v$k"
    assert_only_failure 'current_iteration.txt is missing, but the signed gate records put the run at v3 (records.log line'
    assert_line --partial "never by hand: python3 $REPO_ROOT/helpers/kloop.py status $(printf %q "$OUT") --restore-state"
    refute_line --partial 'state drift'
    [[ ! -e $OUT/current_iteration.txt ]]
  done
  run gate "$OUT/v2" --final
  assert_only_failure 'current_iteration.txt is missing, but the signed gate records put the run at v3'
  run gate "$OUT/v0" --structural
  assert_only_failure 'current_iteration.txt is missing, but the signed gate records put the run at v3'
  [[ ! -e $OUT/current_iteration.txt ]]
}

@test "a corrupt state fails and is left alone" {
  advance_to 1
  local bad
  for bad in 'banana' 'v01' 'v1 v2' '1' ''; do
    printf '%s\n' "$bad" >"$OUT/current_iteration.txt"
    run gate "$OUT/v1"
    assert_only_failure "current_iteration.txt holds '$bad', not a version name: the state is corrupt; the signed gate records put the run at v1"
    assert_line --partial 'status '"$(printf %q "$OUT")"' --restore-state'
    assert_equal "$(state)" "$bad"
  done
}

@test "surrounding whitespace in the state is tolerated" {
  advance_to 1
  printf '  v1 \r\n' >"$OUT/current_iteration.txt"
  run -0 gate "$OUT/v1"
  assert_equal "$(state)" v2
}

@test "a state naming an earlier version fails: gate it first" {
  advance_to 1
  make_version 2
  printf 'v0\n' >"$OUT/current_iteration.txt"
  run gate "$OUT/v1"
  assert_only_failure 'current_iteration.txt names v0, but the last signed gate record (records.log line'
  assert_line --partial 'puts the run at v1: the state was edited by hand'
  refute_line --partial 'gate v0 first'
  assert_equal "$(state)" v0
}

@test "a state two or more versions ahead fails" {
  advance_to 2
  "$GATE" "$OUT/v2" >/dev/null
  run gate "$OUT/v0"
  assert_only_failure 'current_iteration.txt names v3, so v0 was passed earlier: gate v3 instead'
  assert_equal "$(state)" v3
}

@test "artifacts beyond the recorded version are state drift" {
  advance_to 1
  mkdir -p "$OUT/v2" "$OUT/v5"
  run -0 gate "$OUT/v1" --structural
  local f
  for f in kernel.py kernel.cu other.py correctness.md correctness.json ncu.json ncu_summary.md \
    profile.ncu-rep kbs_evidence.md kbs_queries.jsonl hypothesis.txt; do
    printf 'x\n' >"$OUT/v5/$f"
    run gate "$OUT/v1" --structural
    assert_only_failure "state drift: v5 holds $f but current_iteration.txt is at v1"
    rm "$OUT/v5/$f"
  done
}

@test "any file in a version folder beyond the recorded one is drift; empty folders are fine" {
  advance_to 1
  mkdir -p "$OUT/v2" "$OUT/v5"
  run -0 gate "$OUT/v1" --structural
  assert_line 'gate: v1 passed (structural checks, transition); current_iteration.txt not written'
  local f
  for f in notes.txt ref.py .hidden README; do
    printf 'x\n' >"$OUT/v2/$f"
    run gate "$OUT/v1" --structural
    assert_only_failure "state drift: v2 holds $f but current_iteration.txt is at v1"
    run gate "$OUT/v1" --final
    assert_line --partial "[FAIL] state drift: v2 holds $f but current_iteration.txt is at v1"
    rm "$OUT/v2/$f"
  done
  mkdir "$OUT/v5/sub"
  run gate "$OUT/v1" --structural
  assert_only_failure 'state drift: v5 holds sub but current_iteration.txt is at v1'
  rmdir "$OUT/v5/sub"
  ln -s /nonexistent "$OUT/v5/dangling"
  run gate "$OUT/v1" --structural
  assert_only_failure 'state drift: v5 holds dangling but current_iteration.txt is at v1'
  rm "$OUT/v5/dangling"
  printf 'x\n' >"$OUT/v2/a.txt"
  printf 'x\n' >"$OUT/v2/b.txt"
  run gate "$OUT/v1"
  assert_only_failure 'state drift: v2 holds a.txt b.txt but current_iteration.txt is at v1'
  assert_equal "$(state)" v1
}

# Every path under $OUT with its type, size, mode, inode, mtime and (files) content hash.
snapshot() {
  (cd "$OUT" && find . -printf '%p %y %s %m %i %T@\n' | LC_ALL=C sort &&
    find . -type f -exec sha256sum {} + | LC_ALL=C sort)
}

@test "--structural is read-only: it writes nothing, passing or failing" {
  run -0 gate --help
  assert_output --partial 'never writes current_iteration.txt, not even the first v0 state'
  make_run
  local before
  before=$(snapshot)
  run -0 gate "$OUT/v0" --structural
  refute_line --partial 'note:'
  assert_line 'gate: v0 passed (structural checks, transition); current_iteration.txt not written'
  assert_equal "$(snapshot)" "$before"
  [[ ! -e $OUT/current_iteration.txt && ! -e $OUT/.gate.lock ]]

  "$GATE" "$OUT/v0" >/dev/null
  make_version 1
  before=$(snapshot)
  run -0 gate "$OUT/v1" --structural
  run -0 gate "$OUT/v1" --structural --verbose
  run -0 gate "$OUT/v0" --structural
  assert_equal "$(snapshot)" "$before"
  assert_equal "$(state)" v1

  rm "$OUT/v1/ncu_summary.md"
  before=$(snapshot)
  run -1 gate "$OUT/v1" --structural
  run -1 gate "$OUT/v1" --structural --final
  assert_equal "$(snapshot)" "$before"
  assert_equal "$(state)" v1
}

@test "final mode requires the state to name vN and never writes it" {
  advance_to 1
  local before
  before=$(stat -c '%i %.9Y' "$OUT/current_iteration.txt")  # inode and mtime to the nanosecond
  run -0 gate "$OUT/v1" --final
  assert_line 'gate: v1 passed (final audit of v0..v1)'
  assert_equal "$(stat -c '%i %.9Y' "$OUT/current_iteration.txt")" "$before"
  rm "$OUT/current_iteration.txt"
  run gate "$OUT/v1" --final
  assert_only_failure 'current_iteration.txt is missing, but the signed gate records put the run at v1'
  [[ ! -e $OUT/current_iteration.txt ]]
  printf 'v0\n' >"$OUT/current_iteration.txt"
  run gate "$OUT/v1" --final
  assert_only_failure 'puts the run at v1: the state was edited by hand'
  assert_equal "$(state)" v0
}

@test "a pass leaves no temporary files; the lock file stays in <out>" {
  make_run
  run -0 gate "$OUT/v0"
  [[ -f $OUT/.gate.lock ]]
  run -0 find "$OUT" -maxdepth 1 -name '.current_iteration.*'
  assert_output ''
}

hold_lock() {
  # exec replaces the subshell with sleep, so $! is the process holding the lock
  (flock 9 && touch "$BATS_TEST_TMPDIR/locked" && exec sleep "$1") 9>>"$OUT/.gate.lock" 3>&- &
  HOLDER=$!
  local i
  for ((i = 0; i < 100; i++)); do [[ -e $BATS_TEST_TMPDIR/locked ]] && return 0; sleep 0.05; done
  return 1
}

@test "a gate waits for the lock and gives up after GATE_LOCK_TIMEOUT" {
  make_run
  hold_lock 30
  GATE_LOCK_TIMEOUT=1 run -1 --separate-stderr gate "$OUT/v0"
  kill "$HOLDER"
  assert_output ''
  [[ $stderr == "check_iteration_gate: another gate holds "*"gave up after 1s" ]]
  [[ ! -e $OUT/current_iteration.txt ]]
}

@test "a gate blocked by the lock proceeds once it is released" {
  make_run
  hold_lock 2
  run -0 gate "$OUT/v0"
  assert_equal "$(state)" v1
}

@test "--structural shares the lock with readers and waits for a writer" {
  make_run
  "$GATE" "$OUT/v0" >/dev/null
  (flock -s 9 && touch "$BATS_TEST_TMPDIR/locked" && exec sleep 30) 9<"$OUT/.gate.lock" 3>&- &
  HOLDER=$!
  local i
  for ((i = 0; i < 100; i++)); do [[ -e $BATS_TEST_TMPDIR/locked ]] && break; sleep 0.05; done
  GATE_LOCK_TIMEOUT=1 run -0 gate "$OUT/v0" --structural
  kill "$HOLDER"
  rm "$BATS_TEST_TMPDIR/locked"
  hold_lock 30
  GATE_LOCK_TIMEOUT=1 run -1 --separate-stderr gate "$OUT/v0" --structural
  kill "$HOLDER"
  [[ $stderr == "check_iteration_gate: another gate holds "*"gave up after 1s" ]]
}

@test "the transition gate refuses the final version and names the final audit" {
  RUN_ITERATIONS=1 advance_to 1
  run gate "$OUT/v1"
  assert_only_failure "v1 is the final version (run.json iterations): run the final audit instead"
  assert_equal "$(state)" v1
  [[ ! -e $OUT/v2 ]]
  RUN_ITERATIONS=1 run -0 gate "$OUT/v1" --final
}

@test "the final audit refuses a version before the planned final one, unless the run finished there" {
  RUN_ITERATIONS=3 advance_to 1
  run gate "$OUT/v1" --final
  assert_only_failure "v1 is not the final version: the run's final version is v3 (run.json iterations)"
  printf '{"schema": 1, "version": "v1", "planned_final": "v3", "reason": "at the roofline"}\n' >"$OUT/finish.json"
  run gate "$OUT/v1" --final
  assert_line --partial 'finish.json has no signed finish record in records.log: only kernel-loop finish ends a run early'
  sign_record finish v1 "reason=at the roofline"
  run -0 gate "$OUT/v1" --final
  run gate "$OUT/v1"
  assert_only_failure "v1 is the final version (kernel-loop finish ended the run early (records.log line"
}

@test "the final version is read from top-level keys only" {
  # read from finish.json only when the run has no records (--structural on a run made before them)
  RUN_ITERATIONS=3 advance_to 1
  rm "$OUT/records.log"
  printf '{"by": {"version": "v0"}, "note": "\\"version\\": \\"v0\\"", "version": "v1", "reason": "done"}\n' >"$OUT/finish.json"
  run -0 gate "$OUT/v1" --final --structural
  printf '{"by": {"version": "v1"}, "reason": "no top-level version"}\n' >"$OUT/finish.json"
  run gate "$OUT/v1" --final --structural
  assert_only_failure "v1 is not the final version: the run's final version is v3 (run.json iterations)"
}

@test "a run finished at v0 passes its final audit without a state file; a later version still needs it" {
  RUN_ITERATIONS=3 advance_to 0
  run gate "$OUT/v0" --final
  assert_only_failure "v0 is not the final version: the run's final version is v3 (run.json iterations)"
  printf '{"schema": 1, "version": "v0", "planned_final": "v3", "reason": "a baseline check"}\n' >"$OUT/finish.json"
  sign_record finish v0 "reason=a baseline check"
  run -0 gate "$OUT/v0" --final
  [[ ! -e $OUT/current_iteration.txt ]]
}

@test "--dry-run runs every check, verifies the records and writes nothing" {
  make_run
  local before
  before=$(stat -c '%s %.9Y' "$OUT/records.log")
  run -0 gate "$OUT/v0" --dry-run
  assert_line 'gate: v0 passed (dry run, transition); current_iteration.txt not written'
  [[ ! -e $OUT/current_iteration.txt && ! -e $OUT/.gate.lock ]]
  assert_equal "$(stat -c '%s %.9Y' "$OUT/records.log")" "$before"
  sed -i 's/^- gpu-latency-hiding$/- no-such-page/' "$OUT/v0/hypothesis.txt"
  run -0 gate "$OUT/v0" --structural  # a content check the structural run never makes
  run gate "$OUT/v0" --dry-run
  assert_only_failure 'v0: Evidence used: cites no-such-page, which no query logged for v0 returned'
  KERNEL_LOOP_RECORD_KEY="$BATS_TEST_TMPDIR/absent" run gate "$OUT/v0" --dry-run
  assert_only_failure 'no record key at'
  [[ ! -e $OUT/current_iteration.txt && ! -e $OUT/.gate.lock ]]
}
