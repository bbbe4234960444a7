"""The update check (`python -m chariot_support.dev.update_check`) reads only what git's conflict markers look like,
in the engine's own files. tests/test_update.py runs it on a real `cruft update` that conflicts."""

import subprocess

from chariot_support.dev.update_check import Leftover, leftovers, main

OPENING, DIVIDER, CLOSING, BASE = "<" * 7, "=" * 7, ">" * 7, "|" * 7


def test_markers_are_named_by_line_and_a_heading_underline_is_not_one(tmp_path):
    (tmp_path / "notes.md").write_text(
        f"Title\n{DIVIDER}\n\n{OPENING} ours\na\n{BASE} base\nb\n{DIVIDER}\nc\n{CLOSING} theirs\n{'<' * 8} no\n"
    )
    found = leftovers(tmp_path)
    assert [(f.path, f.line, f.text) for f in found] == [
        ("notes.md", 4, f"{OPENING} ours"),
        ("notes.md", 6, f"{BASE} base"),
        ("notes.md", 8, DIVIDER),
        ("notes.md", 10, f"{CLOSING} theirs"),
    ]


def test_rej_files_are_named_and_binary_files_are_not_read(tmp_path):
    (tmp_path / "Dockerfile.rej").write_text("@@ -1 +1 @@\n")
    (tmp_path / "picture.png").write_bytes(b"\x89PNG\0\0" + f"\n{OPENING} x\n".encode())
    assert leftovers(tmp_path) == [Leftover("Dockerfile.rej")]
    assert (
        str(leftovers(tmp_path)[0]) == "Dockerfile.rej: the template's changes to Dockerfile that could not be applied"
    )


def test_a_constraints_file_left_from_before_uv_lock_is_named_with_the_step_that_replaces_it(tmp_path, capsys):
    (tmp_path / "constraints.txt").write_text("numpy==2.4.6\n")
    assert [str(f) for f in leftovers(tmp_path)] == [
        "constraints.txt: the versions engines kept before they were uv projects; uv.lock holds them now"
    ]
    assert main([str(tmp_path)]) == 1
    assert "`git rm constraints.txt && uv lock`" in capsys.readouterr().out


def test_only_the_engines_own_files_are_read(tmp_path):
    for place in (".venv/lib", "build", "src"):
        (tmp_path / place).mkdir(parents=True)
        (tmp_path / place / "x.py").write_text(f"{OPENING} ours\n")
    assert [f.path for f in leftovers(tmp_path)] == ["src/x.py"], "outside git: environments and builds left out"
    (tmp_path / ".gitignore").write_text("/src/\n")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    assert [f.path for f in leftovers(tmp_path)] == [".venv/lib/x.py", "build/x.py"], "in git: what git ignores"


def test_the_command_exits_0_only_when_nothing_is_left(tmp_path, capsys):
    assert main([str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("Nothing left from a template update")
    (tmp_path / "README.md").write_text(f"a\n{OPENING} ours\n")
    assert main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"The template update left these to resolve:\n  README.md:2: {OPENING} ours\n")
    assert "What to do:" in out and "`uv lock`" in out
