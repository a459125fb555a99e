#!/usr/bin/env bash
# The skill as users get it.  Exports the tree git would ship (tracked files plus new files git does
# not ignore, as they are in the working tree) into a folder named kernel-loop, holds it to this
# project's size budget (stricter than the skillmds pack limits of 200 files and 20 MB), lints it
# with the SkillMD CLI, installs it with `skillmd add` into a throwaway project and HOME, and runs the
# helpers, the gate and the demo from the installed copy.  Also checks `make install-skill`.
# Runs after `make setup` (needs node_modules/skillmds and .venv).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

MAX_FILES=198  # four small test files merged into their neighbours for measure/exact.py and the level-3 example; kb_bytes.py (the inputs' bytes read from the source) apart from kb_dims.py, measure/held.py (the results a caller holds) apart from calls.py, measure/modes.py (Model in a mode) apart from conditions.py, measure/libraries.py (kept load_inline libraries) with the GPU logs one xz file and the FlashInfer test in test_benchmark_gpu.py; the judge and its worker (measure/) are a package of their own, the KBS families a module; skillmds allows 200
MAX_BYTES=$((12 * 1024 * 1024))  # 11.2 MB with the level-3 example (1.0 MB, its Nsight Compute reports kept); skillmds allows 20 MB
skillmd=(node "$repo/node_modules/skillmds/bin/skillmd.mjs")
py="$repo/.venv/bin/python"

for need in "$repo/node_modules/skillmds/bin/skillmd.mjs" "$py"; do
  [[ -e $need ]] || { echo "skill-pack: $need is missing; run make setup" >&2; exit 2; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=()
fail() { echo "FAIL: $*"; failures+=("$*"); }
ok() { echo "ok:   $*"; }

# Files of the tree, NUL-separated: tracked or new-and-not-ignored, and present in the working tree
# (a tracked file deleted but not yet committed is left out, as the next commit will leave it out).
tree_files() {
  local f
  while IFS= read -r -d '' f; do
    if [[ -e $f || -L $f ]]; then printf '%s\0' "$f"; fi
  done < <(git ls-files -z --cached --others --exclude-standard | sort -zu)
}

# What skillmds takes into a pack: regular files, symbolic links skipped (relative paths, sorted).
pack_files() {
  (cd "$1" && find . -type f ! -path './.git/*' ! -path '*/node_modules/*' | sed 's|^\./||' | LC_ALL=C sort)
}

# 1. export
src="$work/src/kernel-loop"
mkdir -p "$src"
tree_files | tar --null -T - -cf - | tar -xf - -C "$src"
[[ -f $src/SKILL.md ]] || { echo "skill-pack: export has no SKILL.md" >&2; exit 1; }

# 2. size budget
files=$(pack_files "$src" | wc -l | tr -d ' ')
bytes=$(cd "$src" && pack_files . | tr '\n' '\0' | xargs -0 cat | wc -c | tr -d ' ')
links=$(find "$src" -type l | wc -l | tr -d ' ')
printf 'exported tree: %s files, %s bytes (%s MiB); %s symbolic link(s), which skillmds skips\n' \
  "$files" "$bytes" "$(awk -v b="$bytes" 'BEGIN { printf "%.2f", b / 1048576 }')" "$links"
printf 'largest folders by file count:\n'
pack_files "$src" | awk -F/ '{ d = (NF > 3 ? $1 "/" $2 "/" $3 : (NF > 1 ? $1 "/" $2 : $1)); n[d]++ }
  END { for (d in n) printf "  %5d  %s\n", n[d], d }' | sort -rn | head -8
if (( files > MAX_FILES )); then fail "$files files, more than the budget of $MAX_FILES"
else ok "$files files (budget $MAX_FILES)"; fi
if (( bytes > MAX_BYTES )); then fail "$bytes bytes, more than the budget of $MAX_BYTES (12 MiB)"
else ok "$bytes bytes (budget $MAX_BYTES)"; fi

# 3. lint, and what the security scan reports
if "${skillmd[@]}" lint --strict "$src"; then ok "skillmd lint --strict"; else fail "skillmd lint --strict"; fi
echo "skillmd scan:"
"${skillmd[@]}" scan "$src" || true

# 4. install with the SkillMD CLI: project scope, Claude Code only, copied files, no prompts
home="$work/home"
project="$work/project"
mkdir -p "$home" "$project"
installed="$project/.claude/skills/kernel-loop"
if (cd "$project" && HOME="$home" SKILLMD_NO_TELEMETRY=1 \
      "${skillmd[@]}" add "$src" --mode copy -a claude-code --project --yes </dev/null); then
  ok "skillmd add"
else
  fail "skillmd add"
fi

# 5. the installed copy works
if [[ -f $installed/SKILL.md ]]; then
  if diff <(pack_files "$src") <(pack_files "$installed") >"$work/missing.txt"; then
    ok "installed copy has every exported file"
  else
    fail "installed copy differs from the export:"; cat "$work/missing.txt"
  fi
  run_installed() { (cd "$installed" && HOME="$home" "$@" </dev/null); }
  if run_installed python3 helpers/kloop.py --help >/dev/null; then ok "python3 helpers/kloop.py --help"
  else fail "python3 helpers/kloop.py --help (installed copy)"; fi
  if run_installed bash scripts/check_iteration_gate.sh --help >/dev/null; then ok "bash scripts/check_iteration_gate.sh --help"
  else fail "bash scripts/check_iteration_gate.sh --help (installed copy)"; fi
  if run_installed "$py" helpers/kloop.py demo --no-live --dir "$work/demo" >"$work/demo.log" 2>&1 \
      && grep -q 'passed (final audit' "$work/demo.log"; then
    ok "demo from the installed copy ($(grep -c '^== ' "$work/demo.log") steps, final audit passed)"
  else
    fail "demo from the installed copy:"; tail -20 "$work/demo.log"
  fi
else
  fail "skillmd add left no $installed/SKILL.md; nothing to run"
fi

# 6. make install-skill: refuses a folder not named kernel-loop, copies exactly the tracked files
if err=$(make -s install-skill DEST="$work/wrong-name" 2>&1); then
  fail "make install-skill accepted a folder not named kernel-loop"
elif [[ $(printf '%s\n' "$err" | grep -c 'install-skill:') -ne 1 || -e $work/wrong-name ]]; then
  fail "make install-skill refusal is not a single line, or it wrote something: $err"
else
  ok "make install-skill refuses DEST=.../wrong-name"
fi
dest="$work/by-make/kernel-loop"
if make -s install-skill DEST="$dest" >/dev/null; then
  expected=$(while IFS= read -r -d '' f; do [[ -e $f && ! -L $f ]] && printf '%s\n' "$f"; done \
             < <(git ls-files -z) | LC_ALL=C sort)
  if diff <(printf '%s\n' "$expected") <(pack_files "$dest") >"$work/make.diff"; then
    ok "make install-skill copied exactly the $(printf '%s\n' "$expected" | wc -l | tr -d ' ') tracked files"
  else
    fail "make install-skill copied something other than the tracked files:"; cat "$work/make.diff"
  fi
else
  fail "make install-skill DEST=$dest"
fi

if (( ${#failures[@]} )); then
  printf 'skill-pack: %d check(s) failed\n' "${#failures[@]}"
  exit 1
fi
echo "skill-pack: all checks passed"
