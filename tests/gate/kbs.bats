#!/usr/bin/env bats
# shellcheck shell=bats
# Check 3 (check_3_kbs_headings: kbs_evidence.md sections), its half of check 9, and check 12
# (check_12_kbs_queries: kbs_queries.jsonl).
bats_require_minimum_version 1.5.0
load test_helper

@test "a filled kbs_evidence.md passes checks 3 and 9" {
  make_run
  run -0 gate "$OUT/v0" --verbose
  assert_line '[PASS] v0: kbs_evidence.md has every section in order'
  assert_line '[PASS] v0: every kbs_evidence.md section has content'
  assert_line '[PASS] v0: kbs_evidence.md has no TODO(kernel-loop)'
}

@test "the title may be bare or carry more text" {
  make_run
  sed -i '1s/.*/# KBS Evidence/' "$OUT/v0/kbs_evidence.md"
  run -0 gate "$OUT/v0" --structural
  sed -i '1s/.*/# KBS Evidence - v0 (softmax, H200)/' "$OUT/v0/kbs_evidence.md"
  run -0 gate "$OUT/v0" --structural
}

@test "a missing title fails" {
  make_run
  sed -i '1s/.*/# Evidence/' "$OUT/v0/kbs_evidence.md"
  run gate "$OUT/v0" --structural
  assert_only_failure "kbs_evidence.md lacks '# KBS Evidence'"
}

@test "each missing section is named" {
  make_run
  local h
  cp "$OUT/v0/kbs_evidence.md" "$BATS_TEST_TMPDIR/kbs"
  for h in '## NCU Facts' '## Queries' '## Selected Evidence' '## Rejected / Limits' '## Decision Link'; do
    grep -vxF -- "$h" "$BATS_TEST_TMPDIR/kbs" >"$OUT/v0/kbs_evidence.md"
    run gate "$OUT/v0" --structural
    assert_only_failure "kbs_evidence.md lacks '$h'"
  done
}

@test "sections out of order fail" {
  make_run
  sed -i 's/^## Queries$/## TMP/; s/^## Selected Evidence$/## Queries/; s/^## TMP$/## Selected Evidence/' "$OUT/v0/kbs_evidence.md"
  run gate "$OUT/v0" --structural
  assert_only_failure "kbs_evidence.md lacks '## Selected Evidence'"
}

@test "a heading inside a code fence does not count" {
  make_run
  local f="$OUT/v0/kbs_evidence.md"
  grep -vxF '## Decision Link' "$f" >"$BATS_TEST_TMPDIR/k"
  # shellcheck disable=SC2016  # literal backticks
  printf '```\n## Decision Link\n```\n' >>"$BATS_TEST_TMPDIR/k"
  mv "$BATS_TEST_TMPDIR/k" "$f"
  run gate "$OUT/v0" --structural
  assert_only_failure "kbs_evidence.md lacks '## Decision Link'"
}

@test "an empty section fails check 9; extra sections need content too" {
  make_run
  local f="$OUT/v0/kbs_evidence.md"
  sed -i '/^- cuda-async-copy/d' "$f"
  run gate "$OUT/v0"
  assert_only_failure 'kbs_evidence.md has empty section(s): "## Rejected / Limits"'
  run -0 gate "$OUT/v0" --structural
  make_run
  printf '\n## Notes\n\n' >>"$f"
  run gate "$OUT/v0"
  assert_only_failure 'empty section(s): "## Notes"'
}

@test "TODO(kernel-loop) in kbs_evidence.md fails check 9" {
  make_run
  printf 'TODO(kernel-loop)\n' >>"$OUT/v0/kbs_evidence.md"
  run gate "$OUT/v0"
  assert_only_failure 'v0: kbs_evidence.md still has TODO(kernel-loop) on line(s) 19'
}

@test "kbs_queries.jsonl: missing file fails" {
  make_run
  rm "$OUT/v0/kbs_queries.jsonl"
  run gate "$OUT/v0"
  assert_only_failure 'v0: kbs_queries.jsonl is missing'
  run -0 gate "$OUT/v0" --structural
}

@test "kbs_queries.jsonl: a kernel and a bottleneck query are both required" {
  make_run
  local q="$OUT/v0/kbs_queries.jsonl"
  cp "$q" "$BATS_TEST_TMPDIR/q"
  grep -v '"bottleneck"' "$BATS_TEST_TMPDIR/q" >"$q"
  sign_kbs 0
  run gate "$OUT/v0"
  assert_line --partial 'kbs_queries.jsonl has no "purpose": "bottleneck" query'
  grep -v '"kernel"' "$BATS_TEST_TMPDIR/q" >"$q"
  sign_kbs 0
  run gate "$OUT/v0"
  assert_line --partial 'kbs_queries.jsonl has no "purpose": "kernel" query'
  printf '{"purpose": "extra", "query": "kernel bottleneck", "hits": ["triton-block-size", "gpu-latency-hiding"]}\n' >"$q"
  sign_kbs 0
  run -1 gate "$OUT/v0"
  assert_line 'gate: v0 FAILED: 2 checks'
}

@test "kbs_queries.jsonl edited by hand fails, even when it still parses and names both purposes" {
  make_run
  local q="$OUT/v0/kbs_queries.jsonl"
  printf '%s\n' '{"purpose": "kernel", "query": "anything", "hits": ["triton-block-size", "gpu-latency-hiding"]}' \
    '{"purpose": "bottleneck", "query": "x", "hits": []}' >"$q"
  run gate "$OUT/v0"
  assert_only_failure 'v0: kbs_queries.jsonl differs from what kernel-loop kbs logged'
}

@test "kbs_queries.jsonl as one line of plain text holding both purpose strings fails" {
  make_run
  printf '"purpose": "kernel" "purpose": "bottleneck"\n' >"$OUT/v0/kbs_queries.jsonl"
  sign_kbs 0
  run -1 gate "$OUT/v0"
  assert_line --partial 'v0: kbs_queries.jsonl line 1 is not a JSON object'
}

@test "Evidence used: must cite pages that this version's logged queries returned" {
  make_run
  sed -i 's/^- gpu-latency-hiding$/- invented-page/' "$OUT/v0/hypothesis.txt"
  run gate "$OUT/v0"
  assert_only_failure 'v0: Evidence used: cites invented-page, which no query logged for v0 returned'
  sed -i 's/^- invented-page$/- kbs:gpu-latency-hiding: hides the latency/' "$OUT/v0/hypothesis.txt"
  run -0 gate "$OUT/v0"
}

@test "kbs_evidence.md citing as kbs:ID a page no logged query of the gated version returned is warned, not failed" {
  make_run
  printf '%s\n' '- kbs:gpu-latency-hiding: hides the latency' '- kbs:invented-page: opened for an earlier version' \
    >>"$OUT/v0/kbs_evidence.md"
  run -0 gate "$OUT/v0"
  assert_line '[WARN] v0: kbs_evidence.md cites kbs:invented-page, which no query logged for v0 returned (cite as kbs:ID the pages a logged query of this version found: kernel-loop kbs get ID --log, or kbs query --log; name others bare)'
}

@test "kbs_evidence.md citing as kbs:ID only logged hits, and naming another page bare, draws no warning" {
  make_run
  printf '%s\n' '- kbs:gpu-latency-hiding: hides the latency' '- invented-page, named bare' >>"$OUT/v0/kbs_evidence.md"
  run -0 gate "$OUT/v0"
  refute_line --partial '[WARN]'
}

@test "kbs_queries.jsonl: compact JSON and extra queries pass" {
  make_run
  printf '%s\n' '{"purpose":"bottleneck","query":"x","hits":["gpu-latency-hiding"]}' '{"purpose": "extra", "query": "y"}' \
    '{"query":"z","purpose":  "kernel","hits":["triton-block-size"]}' >"$OUT/v0/kbs_queries.jsonl"
  sign_kbs 0
  run -0 gate "$OUT/v0"
}

@test "kbs_queries.jsonl: \"purpose\" inside another string value does not count" {
  make_run
  printf '%s\n' '{"purpose": "extra", "query": "\"purpose\": \"kernel\" and purpose: kernel"}' \
    '{"purpose" : "bottleneck", "query": "latency-bound", "hits": ["triton-block-size", "gpu-latency-hiding"]}' >"$OUT/v0/kbs_queries.jsonl"
  sign_kbs 0
  run gate "$OUT/v0"
  assert_only_failure 'kbs_queries.jsonl has no "purpose": "kernel" query'
}

@test "Evidence used: a line without an id, or an id hidden behind \"kbs: \", fails" {
  make_run
  sed -i 's/^- gpu-latency-hiding$/: made-up-id/' "$OUT/v0/hypothesis.txt"
  run gate "$OUT/v0"
  assert_only_failure 'v0: Evidence used: cites (a line with no id), which no query logged for v0 returned'
  rm -rf "$OUT" && mkdir -p "$OUT"
  make_run
  sed -i 's/^- gpu-latency-hiding$/- kbs: trust me/' "$OUT/v0/hypothesis.txt"
  run gate "$OUT/v0"
  assert_only_failure 'v0: Evidence used: cites trust, which no query logged for v0 returned'
}
