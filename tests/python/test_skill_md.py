"""SKILL.md limits beyond the reference validator: front matter keys, description, size, references."""

from __future__ import annotations

import re

import yaml

ALLOWED_KEYS = {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}


def _split(repo):
    text = (repo / "SKILL.md").read_text(encoding="utf-8")
    m = re.match(r"^---\n(.*?)\n---\n(.*)$", text, re.S)
    assert m, "SKILL.md must start with a --- front matter block"
    return m.group(1), m.group(2), text


def test_front_matter_keys_and_name(repo):
    raw, _body, _ = _split(repo)
    meta = yaml.safe_load(raw)
    assert set(meta) <= ALLOWED_KEYS, f"keys outside the spec: {set(meta) - ALLOWED_KEYS}"
    assert meta["name"] == "kernel-loop"


def test_description_limits(repo):
    raw, _body, _ = _split(repo)
    meta = yaml.safe_load(raw)
    desc = meta["description"]
    assert 0 < len(desc) <= 1024
    assert "<" not in desc and ">" not in desc
    # quoted in the file, and key terms first
    assert re.search(r'^description: "', raw, re.M)
    assert desc.lower().startswith("gpu kernel optimization")


def test_size_and_reference_files_exist(repo):
    _raw, body, text = _split(repo)
    assert len(text.splitlines()) < 500
    for ref in set(re.findall(r"references/[A-Za-z0-9_]+\.md", body)):
        assert (repo / ref).is_file(), f"SKILL.md names {ref}, which does not exist"


def test_every_helper_command_named_in_skill_exists(repo):
    from kernel_loop.cli import STEPS

    _raw, body, _ = _split(repo)
    commands = {name.replace("next_version", "next") for name in STEPS}
    for used in set(re.findall(r"\$KL ([a-z]+)", body)):
        assert used in commands, f"SKILL.md uses '$KL {used}', which the front door does not have"
