#!/usr/bin/env bats
# shellcheck shell=bats
# Checks 11 and 13: records.log's signed chain, the correctness and profile records of vK, and the
# run files init recorded.  Every forgery here must fail with a message that names it.
bats_require_minimum_version 1.5.0
load test_helper

# Rewrite field $2 of records.log line $1 to value $3, keeping the old signature.
edit_record() {
  awk -v n="$1" -v f="$2" -v v="$3" 'BEGIN { FS = OFS = "\t" }
    NR == n { for (i = 1; i <= NF; i++) if (index($i, f "=") == 1) $i = f "=" v } { print }' \
    "$OUT/records.log" >"$BATS_TEST_TMPDIR/r" && cp "$BATS_TEST_TMPDIR/r" "$OUT/records.log"
}

@test "honest signed records pass and say so" {
  make_run
  run -0 gate "$OUT/v0" --verbose
  assert_line --partial '[PASS] records.log: 4 signed records verify'
  assert_line '[PASS] v0: the signed correctness (PASS) and profile records match v0 as it is now'
}

@test "the kernel edited after it was measured fails, whatever the manifest says" {
  make_run
  printf '# tweak\nBLOCK = 512\n' >>"$OUT/v0/kernel.py"
  (cd "$OUT/v0" && sha256sum kernel.py correctness.md ncu_summary.md ncu_details.md ../run.json >measured.sha256)
  run -1 gate "$OUT/v0"
  assert_line --partial 'v0: kernel.py changed after correctness ran'
  assert_line --partial 'v0: kernel.py changed after profile ran'
  assert_line 'gate: v0 FAILED: 2 checks'
}

@test "ref.py edited after init (a looser atol) fails" {
  make_run
  printf 'atol = 0.5\n' >>"$OUT/ref.py"
  run gate "$OUT/v0"
  assert_only_failure 'ref.py changed after kernel-loop init recorded it'
}

@test "run.json edited after init (trials, tolerances, seed) fails" {
  make_run
  write_run_json 7
  run gate "$OUT/v0"
  assert_only_failure 'run configuration changed during the run: run.json differs from what kernel-loop init recorded'
}

@test "correctness.json set to FAIL by hand fails; so does a signed FAIL" {
  make_run
  sed -i 's/PASS/FAIL/' "$OUT/v0/correctness.json"
  run gate "$OUT/v0"
  assert_only_failure 'v0: correctness.json changed after kernel-loop correctness wrote it'
  make_run
  local fields
  mapfile -t fields < <(run_fields)
  sign_record correctness v0 result=FAIL device=cuda:0 "kernel=$(sha "$OUT/v0/kernel.py")" "${fields[@]}" \
    "files=correctness.md:$(sha "$OUT/v0/correctness.md")"
  run gate "$OUT/v0"
  assert_only_failure 'v0: the last correctness record of v0 says FAIL, not PASS'
}

@test "an edited profile file asks for profile again" {
  make_run
  printf 'extra\n' >>"$OUT/v0/ncu_summary.md"
  run gate "$OUT/v0"
  assert_only_failure 'v0: ncu_summary.md changed after kernel-loop profile wrote it'
}

@test "a CPU-mode result does not count for a GPU run" {
  write_run_json
  printf 'def reference(x):\n    return x.softmax(-1)\n' >"$OUT/ref.py"
  sign_init
  DEVICE=cpu make_version 0
  run -1 gate "$OUT/v0"
  assert_line --partial 'v0: correctness ran on cpu, but this run measures on cuda:0'
  assert_line --partial 'v0: profile ran on cpu, but this run measures on cuda:0'
}

@test "a version with no records, or a run without records.log, fails" {
  make_run
  mkdir -p "$BATS_TEST_TMPDIR/keep" && cp -r "$OUT/v0" "$BATS_TEST_TMPDIR/keep/"
  head -n 1 "$OUT/records.log" >"$BATS_TEST_TMPDIR/r" && cp "$BATS_TEST_TMPDIR/r" "$OUT/records.log"
  run -1 gate "$OUT/v0"
  assert_line --partial 'v0: records.log has no correctness record for v0'
  assert_line --partial 'v0: records.log has no profile record for v0'
  assert_line --partial 'v0: records.log has no kbs record for v0'
  rm "$OUT/records.log"
  run gate "$OUT/v0"
  assert_only_failure 'records.log is missing'
  run -0 gate "$OUT/v0" --structural
}

@test "a record edited after signing, or signed with another key, fails" {
  make_run
  cp "$OUT/records.log" "$BATS_TEST_TMPDIR/good"
  edit_record 2 result PASS
  edit_record 2 device cuda:0
  run -0 gate "$OUT/v0" --structural
  edit_record 2 kernel "$(printf 'x' | sha256sum | cut -d' ' -f1)"
  run gate "$OUT/v0"
  assert_only_failure 'records.log line 2: the signature does not verify: the record was edited after it was signed'
  cp "$BATS_TEST_TMPDIR/good" "$OUT/records.log"
  openssl rand -hex 32 >"$BATS_TEST_TMPDIR/other key"
  KERNEL_LOOP_RECORD_KEY="$BATS_TEST_TMPDIR/other key" sign_record correctness v0 result=PASS
  run gate "$OUT/v0"
  assert_only_failure 'records.log line 5 was signed with another key'
}

@test "lines removed, reordered or re-chained by hand break the chain" {
  make_run
  cp "$OUT/records.log" "$BATS_TEST_TMPDIR/good"
  sed -i '2d' "$OUT/records.log"
  run gate "$OUT/v0"
  assert_only_failure 'records.log line 2 is not record 2 of the chain'
  cp "$BATS_TEST_TMPDIR/good" "$OUT/records.log"
  awk 'NR == 2 { held = $0; next } { print } NR == 3 { print held }' "$BATS_TEST_TMPDIR/good" >"$OUT/records.log"
  run gate "$OUT/v0"
  assert_only_failure 'records.log line 2 is not record 2 of the chain'
  cp "$BATS_TEST_TMPDIR/good" "$OUT/records.log"
  edit_record 3 prev "$(printf 'y' | sha256sum | cut -d' ' -f1)"
  run gate "$OUT/v0"
  assert_only_failure 'records.log line 3 does not follow the line before it'
  printf 'hand-written line\n' >>"$BATS_TEST_TMPDIR/good"
  cp "$BATS_TEST_TMPDIR/good" "$OUT/records.log"
  run gate "$OUT/v0"
  assert_only_failure 'records.log line 5 is not a record'
}

@test "the key: missing, corrupt or inside the run directory fails with a message naming it" {
  make_run
  local key=$KERNEL_LOOP_RECORD_KEY
  KERNEL_LOOP_RECORD_KEY="$BATS_TEST_TMPDIR/absent" run gate "$OUT/v0"
  assert_only_failure "no record key at $BATS_TEST_TMPDIR/absent: point KERNEL_LOOP_RECORD_KEY at the key file this run was made with"
  refute_output --partial 'create it at kernel-loop init'
  printf 'not hex\n' >"$BATS_TEST_TMPDIR/bad"
  KERNEL_LOOP_RECORD_KEY="$BATS_TEST_TMPDIR/bad" run gate "$OUT/v0"
  assert_only_failure 'is not 64 lowercase hex characters'
  cp "$key" "$OUT/key"
  KERNEL_LOOP_RECORD_KEY="$OUT/key" run gate "$OUT/v0"
  assert_only_failure 'lies inside the run directory'
  # the default location, with no variable set
  unset KERNEL_LOOP_RECORD_KEY
  mkdir -p "$HOME/.config/kernel-loop" && cp "$key" "$HOME/.config/kernel-loop/record.key"
  run -0 gate "$OUT/v0"
}

@test "a complete run of hand-written artifacts with no helper behind it fails" {
  make_run
  rm "$OUT/records.log"
  advance_run_by_hand() {
    local d="$OUT/v0"
    printf '# Correctness\n\n| Result | PASS |\n' >"$d/correctness.md"
  }
  advance_run_by_hand
  run gate "$OUT/v0"
  assert_only_failure 'records.log is missing'
}

@test "a record measured on another GPU model than init's fails" {
  make_run
  local fields
  mapfile -t fields < <(run_fields)
  sign_record correctness v0 result=PASS device=cuda:0 "gpu=NVIDIA H100 80GB HBM3" "kernel=$(sha "$OUT/v0/kernel.py")" \
    "${fields[@]}" "files=correctness.md:$(sha "$OUT/v0/correctness.md"),correctness.json:$(sha "$OUT/v0/correctness.json")"
  run gate "$OUT/v0"
  assert_only_failure 'v0: correctness ran on a NVIDIA H100 80GB HBM3, but init measured this run'
}

@test "a record with a repeated key or an empty field is not a record" {
  make_run
  sign_record benchmark v0 result=ok result=PASS
  run gate "$OUT/v0"
  assert_only_failure 'records.log line 5 is not a record'
  make_run_again() { rm -rf "$OUT" && mkdir -p "$OUT" && make_run; }
  make_run_again
  printf 'rec=1\t\tseq=5\tmac=00\n' >>"$OUT/records.log"
  run gate "$OUT/v0"
  assert_only_failure 'records.log line 5 is not a record (an empty field or a CR)'
}

@test "a second gate record for a passed version fails the final audit" {
  advance_to 1
  sign_record gate v0 result=passed "files=hypothesis.txt:$(sha "$OUT/v0/hypothesis.txt")"
  run -1 gate "$OUT/v1" --final
  assert_line --partial 'v0: records.log holds 2 gate records for v0: a version passes its gate once'
}

@test "without the key the gate stops at the key: no second, false failure about the final version" {
  RUN_ITERATIONS=1 advance_to 1
  sign_record extend v1 iterations=2 from=1 "note=final version v1 -> v2"
  "$GATE" "$OUT/v1" >/dev/null
  make_version 2
  run -0 gate "$OUT/v2" --final
  KERNEL_LOOP_RECORD_KEY="$BATS_TEST_TMPDIR/absent" run gate "$OUT/v2" --final
  assert_only_failure "no record key at $BATS_TEST_TMPDIR/absent"
  refute_line --partial 'is not the final version'
  printf '%s\n' "$(openssl rand -hex 32)" >"$BATS_TEST_TMPDIR/other key"
  KERNEL_LOOP_RECORD_KEY="$BATS_TEST_TMPDIR/other key" run gate "$OUT/v2" --final
  assert_only_failure 'records.log line 1 was signed with another key'
}

@test "a profile record that says the profile failed is not a profile" {
  make_run
  local fields
  mapfile -t fields < <(run_fields)
  sign_record profile v0 result=FAIL "error=the kernel is wrong with fresh inputs after the timed calls" \
    device=cuda:0 "gpu=NVIDIA H200" "kernel=$(sha "$OUT/v0/kernel.py")" "${fields[@]}"
  run gate "$OUT/v0"
  assert_only_failure 'v0: the last profile record of v0 says FAIL, not ok (records.log line 5)'
}

@test "a cpu-test-mode run fails in one line naming the mode, not five asking for profile artifacts" {
  write_run_json
  sed -i 's/}$/, "device": "cpu"}/' "$OUT/run.json"
  printf 'def reference(x):\n    return x.softmax(-1)\n' >"$OUT/ref.py"
  sign_init
  mkdir -p "$OUT/v0" && printf 'def run_kernel(x, out):\n    out.copy_(x)\n' >"$OUT/v0/kernel.py"
  local flag
  for flag in '' --structural --dry-run; do
    run gate "$OUT/v0" ${flag:+"$flag"}
    assert_only_failure 'v0: this run uses the cpu test mode (run.json device cpu): the gate passes only a GPU run'
  done
  [[ ! -e $OUT/current_iteration.txt ]]
}
