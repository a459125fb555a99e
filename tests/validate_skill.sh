#!/usr/bin/env bash
# Validate SKILL.md with the Agent Skills reference validator (skills-ref).
# The validator requires the folder name to equal the skill name, so it checks
# the repository through a link named kernel-loop.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
validator=${AGENTSKILLS:-$repo/.venv/bin/agentskills}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ln -s "$repo" "$tmp/kernel-loop"
"$validator" validate "$tmp/kernel-loop"
