#!/usr/bin/env bats
# shellcheck shell=bats
# Check 4 (check_4_kernel: exactly one non-empty kernel, bytes differ) and check 10
# (check_10_kernel_change: differs beyond whitespace and comments).
bats_require_minimum_version 1.5.0
load test_helper

@test "kernel.py passes; v1 with a real change passes checks 4 and 10" {
  advance_to 1
  run -0 gate "$OUT/v1" --verbose
  assert_line '[PASS] v1: kernel.py present and differs from v0/kernel.py'
  assert_line '[PASS] v1: kernel.py changes code, not only whitespace or comments'
}

@test "no kernel file fails" {
  make_run
  rm "$OUT/v0/kernel.py"
  run gate "$OUT/v0" --structural
  assert_only_failure 'v0: needs exactly one kernel file (kernel.py or kernel.cu); found 0'
}

@test "kernel.py and kernel.cu together fail" {
  make_run
  printf '__global__ void k() {}\n' >"$OUT/v0/kernel.cu"
  run gate "$OUT/v0" --structural
  assert_only_failure 'holds both kernel.py and kernel.cu'
}

@test "ref.py beside the kernel never counts; any other source file beside it fails" {
  make_run
  cp "$OUT/ref.py" "$OUT/v0/ref.py"
  run -0 gate "$OUT/v0" --structural
  printf 'X = 1\n' >"$OUT/v0/launch_helpers.py"
  run gate "$OUT/v0" --structural
  assert_only_failure 'v0: v0 holds source files besides kernel.py: launch_helpers.py'
  rm "$OUT/v0/launch_helpers.py"
  printf '#define T 4\n' >"$OUT/v0/tile.cuh"
  run gate "$OUT/v0" --structural
  assert_only_failure 'v0 holds source files besides kernel.py: tile.cuh'
}

@test "a kernel file name with a space, a glob character or a tab fails" {
  make_run
  local name
  for name in 'my kernel.py' 'k[3].py' $'k\tx.py'; do
    rm -f "$OUT"/v0/*.py
    kernel_text 0 >"$OUT/v0/$name"
    run gate "$OUT/v0" --structural
    assert_only_failure "holds characters other than letters, digits"
  done
}

@test "one other-named kernel file is accepted, two are not" {
  make_run
  mv "$OUT/v0/kernel.py" "$OUT/v0/softmax.py"
  cp "$OUT/ref.py" "$OUT/v0/ref.py"
  measure 0
  run -0 gate "$OUT/v0" --dry-run
  printf '__global__ void k() {}\n' >"$OUT/v0/softmax.cu"
  run gate "$OUT/v0" --structural
  assert_only_failure 'found 2 .py/.cu files besides ref.py'
}

@test "an empty kernel fails" {
  make_run
  : >"$OUT/v0/kernel.py"
  run gate "$OUT/v0" --structural
  assert_only_failure 'v0: kernel.py is empty'
}

@test "v1 byte-identical to v0 fails" {
  advance_to 1
  cp "$OUT/v0/kernel.py" "$OUT/v1/kernel.py"
  measure 1
  run gate "$OUT/v1" --structural
  assert_only_failure 'v1: kernel.py is byte-identical to v0/kernel.py'
}

@test ".py: a change only in comments and whitespace fails check 10" {
  advance_to 1
  { sed 's/  # version 0/   # tuned later/; s/^    offs = /    offs  =  /' "$OUT/v0/kernel.py"
    printf '\n# trailing note\n\n'; } >"$OUT/v1/kernel.py"
  measure 1
  run gate "$OUT/v1"
  assert_only_failure 'v1: kernel.py differs from v0 only in whitespace or comments'
  run -0 gate "$OUT/v1" --structural
}

@test ".py: a change in indentation counts as code" {
  advance_to 1
  sed 's/^    e = tl.exp/        e = tl.exp/' "$OUT/v0/kernel.py" >"$OUT/v1/kernel.py"
  measure 1
  run -0 gate "$OUT/v1"
}

write_cu() {
  cat >"$1" <<'CU'
// vector add
__global__ void vadd(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;  /* global index */
  if (i < n) c[i] = a[i] + b[i];
}
CU
}

cu_run() {
  make_run
  rm "$OUT/v0/kernel.py"
  write_cu "$OUT/v0/kernel.cu"
  measure 0
  "$GATE" "$OUT/v0" >/dev/null
  make_version 1
  rm "$OUT/v1/kernel.py"
}

@test ".cu: // and /* */ comment and whitespace changes fail check 10" {
  cu_run
  { printf '/* header\n   spanning lines */\n'
    sed 's|// vector add|// elementwise add, v1|; s|/\* global index \*/|/* i */|; s/  if (i < n)/  if (i<n)/' "$OUT/v0/kernel.cu"
  } >"$OUT/v1/kernel.cu"
  measure 1
  run gate "$OUT/v1"
  assert_only_failure 'v1: kernel.cu differs from v0 only in whitespace or comments'
}

@test ".cu: a code change passes" {
  cu_run
  sed 's/a\[i\] + b\[i\]/__ldg(a + i) + __ldg(b + i)/' "$OUT/v0/kernel.cu" >"$OUT/v1/kernel.cu"
  measure 1
  run -0 gate "$OUT/v1"
}

@test "the previous version without a kernel cannot be compared" {
  advance_to 1
  mv "$OUT/v0/kernel.py" "$OUT/v0/kernel.py.old"
  run -1 gate "$OUT/v1" --structural
  assert_line --partial '[FAIL] v1: cannot compare with v0: v0 has no single kernel file'
}

@test "a symlinked kernel fails, even when its target is a new file" {
  make_run
  mv "$OUT/v0/kernel.py" "$BATS_TEST_TMPDIR/kernel.py"
  ln -s "$BATS_TEST_TMPDIR/kernel.py" "$OUT/v0/kernel.py"
  measure 0
  run gate "$OUT/v0"
  assert_only_failure 'v0: kernel.py is a symbolic link: copy the kernel into v0'
  run -1 gate "$OUT/v0" --structural
}

@test "a version directory that is a symlink fails" {
  advance_to 1
  mv "$OUT/v1" "$OUT/v1-real"
  ln -s v1-real "$OUT/v1"
  run gate "$OUT/v1"
  assert_only_failure 'v1: v1 is a symbolic link'
  rm "$OUT/v1"
  mv "$OUT/v1-real" "$OUT/v1"
  run -0 gate "$OUT/v1"
}

@test "a transition that changes more than one launch or tuning value warns, and still passes" {
  advance_to 1
  run -0 gate "$OUT/v1" --verbose
  refute_line --partial '[WARN]'
  rm -rf "$OUT" && mkdir -p "$OUT"
  make_run
  run -0 gate "$OUT/v0"
  make_version 1
  # two launches with the same value: one value, shown once; a value v0 lacks is "new"
  printf '\nsoftmax_kernel[(1,)](x, y, n, num_warps=8)\nsoftmax_kernel[(2,)](x, y, n, num_warps=8)\n' >>"$OUT/v1/kernel.py"
  measure 1
  run -0 gate "$OUT/v1"
  assert_line '[WARN] v1: kernel.py changes 2 launch/tuning values against v0: BLOCK (64 -> 128), num_warps (new: 8) (one change per version makes each measurement attributable)'
}

@test "a revert to an earlier version's bytes is said to be one, not warned as many launch/tuning changes" {
  make_run
  run -0 gate "$OUT/v0"
  make_version 1
  printf '\nsoftmax_kernel[(1,)](x, y, n, num_warps=8)\n' >>"$OUT/v1/kernel.py"
  measure 1
  run -0 gate "$OUT/v1"
  assert_line --partial '[WARN] v1: kernel.py changes 2 launch/tuning values'
  make_version 2
  cp "$OUT/v0/kernel.py" "$OUT/v2/kernel.py"
  measure 2
  run -0 gate "$OUT/v2"
  refute_line --partial '[WARN]'
  assert_line '[INFO] v2: kernel.py is byte-identical to v0/kernel.py: a revert to v0 (v1'"'"'s launch/tuning values go back to v0'"'"'s), one change'
}

@test "a fusion that removes a kernel and its launch is said to be one, not warned as many launch/tuning changes" {
  make_run
  printf '\n\n@triton.jit\ndef scale_kernel(y_ptr, n, BLOCK_S: tl.constexpr):\n    pass\n\n\nscale_kernel[(4,)](y, n, BLOCK_S=256, num_warps=4)\n' >>"$OUT/v0/kernel.py"
  measure 0
  run -0 gate "$OUT/v0"
  make_version 1
  sed 's/^BLOCK = .*/BLOCK = 64  # version 0/' "$OUT/v1/kernel.py" >"$OUT/v1/k" && mv "$OUT/v1/k" "$OUT/v1/kernel.py"
  sed -i 's/e \/ tl.sum(e, 0)/2.0 * e \/ tl.sum(e, 0)/' "$OUT/v1/kernel.py"
  measure 1
  run -0 gate "$OUT/v1"
  refute_line --partial '[WARN]'
  assert_line '[INFO] v1: kernel.py defines 1 kernel where v0/kernel.py defines 2: a fusion that removes a kernel and its launch (with it: BLOCK_S (removed: 256), num_warps (removed: 4)), one change'
}
