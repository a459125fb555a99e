#!/usr/bin/env bats
# shellcheck shell=bats
# references/hypothesis.md and references/kbs_evidence.md stay in step with the gate:
# their template blocks, filled in, pass; left unfilled, they fail check 9
# (check_9_templates_filled).
bats_require_minimum_version 1.5.0
load test_helper

HYP_DOC="$REPO_ROOT/references/hypothesis.md"
KBS_DOC="$REPO_ROOT/references/kbs_evidence.md"

@test "each reference holds exactly one fenced template block" {
  run -0 grep -c '^```[a-z]' "$HYP_DOC"
  assert_output 1
  run -0 grep -c '^```text$' "$HYP_DOC"
  assert_output 1
  run -0 grep -c '^```[a-z]' "$KBS_DOC"
  assert_output 1
  run -0 grep -c '^```markdown$' "$KBS_DOC"
  assert_output 1
}

@test "the hypothesis template lists every heading in order with a TODO under each" {
  run -0 fenced_block "$HYP_DOC" '```text'
  local expected=() h
  for h in 'Version:' 'Current evidence:' 'Decision link:' 'Single change:' 'Rationale:' \
    'Expected metric movement:' 'Risk:' 'Evidence used:' 'Decision rule:'; do
    expected+=("$h" 'TODO(kernel-loop)')
  done
  assert_equal "$output" "$(printf '%s\n' "${expected[@]}")"
}

@test "filled templates pass the gate" {
  make_run
  fenced_block "$HYP_DOC" '```text' | fill_template /dev/stdin >"$OUT/v0/hypothesis.txt"
  fenced_block "$KBS_DOC" '```markdown' | fill_template /dev/stdin >"$OUT/v0/kbs_evidence.md"
  run -1 grep -c 'TODO' "$OUT/v0/hypothesis.txt" "$OUT/v0/kbs_evidence.md"
  assert_output "$(printf '%s:0\n' "$OUT/v0/hypothesis.txt" "$OUT/v0/kbs_evidence.md")"
  run -0 gate "$OUT/v0"
  run -0 head -n 1 "$OUT/v0/kbs_evidence.md"
  assert_output '# KBS Evidence - v0'
}

@test "unfilled templates fail check 9 only" {
  make_run
  fenced_block "$HYP_DOC" '```text' >"$OUT/v0/hypothesis.txt"
  fenced_block "$KBS_DOC" '```markdown' >"$OUT/v0/kbs_evidence.md"
  run -1 gate "$OUT/v0"
  assert_line --partial '[FAIL] v0: kbs_evidence.md still has TODO(kernel-loop) on line(s) 1 4 7 10 13 16'
  assert_line --partial '[FAIL] v0: hypothesis.txt still has TODO(kernel-loop) on line(s) 2 4 6 8 10 12 14 16 18'
  assert_line 'gate: v0 FAILED: 2 checks'
  run -0 gate "$OUT/v0" --structural
}

# The prediction grammar documented in references/hypothesis.md, as an ERE.
PREDICTION='^([a-z_]+): *(<=|>=|<|>|=|[-+]) *[0-9]+(\.[0-9]+)?%?$'

metric_known() {
  [[ $1 == duration || $1 == event_median_us ]] && return 0
  [[ $1 == stall_* ]] && return 0
  grep -q "\`$1\`" "$REPO_ROOT/references/artifacts.md"
}

@test "documented and fixture predictions follow the grammar and name real metrics" {
  local lines=() line
  mapfile -t lines < <(grep -E '^    [a-z_]+: ' "$HYP_DOC" | sed 's/^    //')
  (( ${#lines[@]} >= 4 ))
  make_run
  mapfile -t -O "${#lines[@]}" lines < <(awk '/^Expected metric movement:$/ { f = 1; next } /^Risk:$/ { f = 0 } f' "$OUT/v0/hypothesis.txt")
  for line in "${lines[@]}"; do
    [[ $line =~ $PREDICTION ]] || fail "not a prediction: $line"
    metric_known "${BASH_REMATCH[1]}" || fail "unknown metric in: $line"
  done
  [[ ! 'duration: ~30%' =~ $PREDICTION ]]
  [[ ! 'duration -30%' =~ $PREDICTION ]]
}
