#!/usr/bin/env python3
"""Check the ``merge_sha`` recorded in each KBS pr-note against a local git mirror.

For every note in the corpus file (YAML front-matter blocks with ``repo``, ``pr`` and
``merge_sha`` fields) whose repository has a mirror under ``--mirrors`` (a folder named
``owner+name`` holding a bare git directory, either directly or as ``repo/``), this script
asks git whether the commit exists and whether its message names the PR (``#<pr>`` or
``pull/<pr>``), or whether it is a merge commit whose second parent is the PR's head ref.

One line is printed per note, starting with its status:

* ``ok``            the commit exists and belongs to the PR;
* ``sha-missing``   the note has no ``merge_sha`` field (or it is empty);
* ``unknown-sha``   the value is not a 40-hex SHA, or the mirror has no such commit;
* ``pr-not-named``  the commit exists but nothing ties it to the PR number;
* ``no-mirror``     the repository was not fetched, so nothing was checked.

``--mirror-for owner/name=PATH`` (repeatable) makes another mirror stand for a repository,
e.g. a fork whose history holds the same upstream commits when upstream itself was too large
to fetch; PATH is a bare git directory or a folder holding one as ``repo/`` or ``repo/.git``.
Each such choice is printed first, as a ``# mirror-for`` line.

A summary line follows. The exit status is 1 when any note of a mirrored repository is
not ``ok``, else 0.

CI does not run this script: it needs repository mirrors fetched onto the machine first.
Usage::

    python3 scripts/kbs_check_shas.py --corpus helpers/kernel_loop/kbs_corpus/pr-note.md \\
        --mirrors /work/.mirror [--mirror-for vllm-project/vllm=/work/.mirror/someone+vllm]
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
from pathlib import Path

SHA_RE = re.compile(r"^[0-9a-f]{40}$")
FIELD_RE = re.compile(r"^(id|repo|pr|merge_sha):[ \t]*(.*?)[ \t]*$")


def parse_notes(text: str) -> list[dict[str, str]]:
    """Return the top-level id/repo/pr/merge_sha fields of every front-matter block."""
    lines = text.splitlines()
    notes: list[dict[str, str]] = []
    i = 0
    while i < len(lines):
        # A block opens with a '---' line directly followed by a top-level 'id:' line.
        if lines[i].strip() == "---" and i + 1 < len(lines) and lines[i + 1].startswith("id:"):
            fields: dict[str, str] = {}
            j = i + 1
            while j < len(lines) and lines[j].strip() != "---":
                m = FIELD_RE.match(lines[j])
                if m and m.group(1) not in fields:
                    fields[m.group(1)] = m.group(2).strip("\"'")
                j += 1
            notes.append(fields)
            i = j + 1
        else:
            i += 1
    return notes


def is_git_dir(cand: Path) -> bool:
    return (cand / "HEAD").is_file() and (cand / "objects").is_dir()


def git_dir_for(mirrors: Path, repo: str, mirror_for: dict[str, Path] | None = None) -> Path | None:
    """Find the bare git directory of the mirror standing for repo, or None.

    A ``--mirror-for`` entry wins; otherwise the mirror named owner+name under ``mirrors``.
    """
    if mirror_for and repo in mirror_for:
        base = mirror_for[repo]
        for cand in (base / "repo", base / "repo" / ".git", base):
            if is_git_dir(cand):
                return cand
        return None
    base = mirrors / repo.replace("/", "+")
    for cand in (base / "repo", base):
        if is_git_dir(cand):
            return cand
    return None


def git(git_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "--git-dir", str(git_dir), *args],
        capture_output=True,
        text=True,
        check=False,
    )


def check_note(
    note: dict[str, str], mirrors: Path, mirror_for: dict[str, Path] | None = None
) -> tuple[str, str]:
    """Return (status, detail) for one note."""
    repo = note.get("repo", "")
    pr = note.get("pr", "")
    git_dir = git_dir_for(mirrors, repo, mirror_for) if repo else None
    if git_dir is None:
        return "no-mirror", f"no mirror for {repo or '(no repo field)'}"
    sha = note.get("merge_sha", "").lower()
    if not sha:
        return "sha-missing", "no merge_sha field"
    if not SHA_RE.match(sha):
        return "unknown-sha", f"not a 40-hex SHA: {sha!r}"
    shown = git(git_dir, "show", "-s", "--format=%P%x00%B", f"{sha}^{{commit}}")
    if shown.returncode != 0:
        return "unknown-sha", "commit not found in mirror"
    parents_field, _, message = shown.stdout.partition("\x00")
    subject = message.strip().splitlines()[0] if message.strip() else ""
    if not pr.isdigit():
        return "pr-not-named", f"note has no numeric pr field ({pr!r})"
    if re.search(rf"(?:#|pull/){pr}(?!\d)", message):
        return "ok", subject
    parents = parents_field.split()
    if len(parents) >= 2:
        head = git(git_dir, "rev-parse", "--verify", "-q", f"refs/pull/{pr}/head^{{commit}}")
        if head.returncode == 0 and head.stdout.strip() == parents[1]:
            return "ok", f"merge of refs/pull/{pr}/head: {subject}"
    return "pr-not-named", f"message does not name #{pr}: {subject}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--corpus", required=True, type=Path, help="pr-note corpus file")
    ap.add_argument("--mirrors", required=True, type=Path, help="folder of owner+name git mirrors")
    ap.add_argument(
        "--mirror-for",
        action="append",
        default=[],
        metavar="OWNER/NAME=PATH",
        help="git mirror standing for a repository (repeatable), e.g. a fork of it",
    )
    args = ap.parse_args(argv)

    mirror_for: dict[str, Path] = {}
    for item in args.mirror_for:
        repo, sep, path = item.partition("=")
        if not sep or "/" not in repo or not path:
            ap.error(f"--mirror-for wants OWNER/NAME=PATH, not {item!r}")
        if repo in mirror_for:
            ap.error(f"--mirror-for given twice for {repo}")
        mirror_for[repo] = Path(path)
        found = git_dir_for(args.mirrors, repo, mirror_for)
        print(f"# mirror-for {repo}={path} ({found if found else 'no git directory there'})")

    notes = parse_notes(args.corpus.read_text(encoding="utf-8"))
    counts: collections.Counter[str] = collections.Counter()
    for note in notes:
        status, detail = check_note(note, args.mirrors, mirror_for)
        counts[status] += 1
        cols = [status, note.get("id", "?"), note.get("repo", "?"), note.get("pr", "?")]
        cols += [note.get("merge_sha", "-") or "-", detail]
        print("\t".join(cols))
    failures = sum(n for status, n in counts.items() if status not in ("ok", "no-mirror"))
    order = ("ok", "sha-missing", "unknown-sha", "pr-not-named", "no-mirror")
    summary = " ".join(f"{k}={counts[k]}" for k in order)
    print(f"total={len(notes)} {summary} failures={failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
