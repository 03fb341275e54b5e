"""The docs match the code: every `slimspec` command the README and the docs name exists and answers `--help`, and
every repository path they name exists."""

import re
import subprocess
from pathlib import Path

import pytest

from slimspec_hf import cli

from .testing_utils import REPO_ROOT


DOCS = sorted(
    {
        REPO_ROOT / "README.md",
        REPO_ROOT / "model_cards" / "README.md",
        REPO_ROOT / "experiments" / "README.md",
        *(REPO_ROOT / "docs").glob("*.md"),
        *(REPO_ROOT / "recipes").rglob("README.md"),
    }
)
# Code as markdown writes it: fenced blocks and `inline spans`.
CODE = re.compile(r"```.*?```|`[^`\n]+`", re.S)
COMMAND = re.compile(r"(?:^|[\s(;&|`])slimspec\s+([a-z][a-z-]*)", re.M)
TOP_LEVEL = ("src", "docs", "recipes", "scripts", "experiments", "tests", "drafters", "model_cards", "data")
PATH = re.compile(r"(?<![\w./<>-])((?:" + "|".join(TOP_LEVEL) + r")/[\w./-]*)")
PLACEHOLDER = re.compile(r"[<>*{}$…]|\.\.\.")
# What a command is about to write (`prepare-data --out DIR`, `bench --output-dir DIR`) need not exist yet.
OUTPUT_FLAG = re.compile(r"--(?:out|out-dir|output-dir|output_dir|dest)[ =]$")


def _code(path: Path) -> str:
    return "\n".join(CODE.findall(path.read_text(encoding="utf-8")))


def _commands() -> dict[str, list[str]]:
    named: dict[str, list[str]] = {}
    for doc in DOCS:
        for name in COMMAND.findall(_code(doc)):
            named.setdefault(name, []).append(str(doc.relative_to(REPO_ROOT)))
    return named


def _paths() -> list[tuple[str, str]]:
    """(doc, path) for every repository path a doc names, less those the doc's own commands write (`--out PATH`)."""
    found, written = set(), set()
    for doc in DOCS:
        name = str(doc.relative_to(REPO_ROOT))
        text = doc.read_text(encoding="utf-8")
        for span in CODE.findall(text):
            for match in PATH.finditer(span):
                end = match.end()
                if PLACEHOLDER.search(span[match.start() : end + 1]):
                    continue  # `recipes/<target>/...`, `docs/results/v1_*`: a pattern, not a path
                path = match.group(1).split("::")[0].rstrip(".,:;")
                (written if OUTPUT_FLAG.search(span[: match.start()]) else found).add((name, path))
    return sorted(found - written)


def _in_a_checkout() -> set[str] | None:
    """Every path a clean checkout has: the tracked files and their folders (a file this machine made does not count);
    None outside a git checkout."""
    try:
        listed = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    paths = set()
    for line in listed.stdout.splitlines():
        parts = line.split("/")
        paths.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    return paths


def test_the_docs_are_found_and_name_commands_and_paths():
    assert REPO_ROOT / "README.md" in DOCS and len(DOCS) >= 10
    assert {"generate", "train", "bench", "push"} <= set(_commands())
    assert len(_paths()) >= 30


@pytest.mark.parametrize("name", sorted(_commands()))
def test_named_command_exists_and_answers_help(name, capsys):
    where = ", ".join(sorted(set(_commands()[name])))
    assert name in cli.COMMANDS, (
        f"`slimspec {name}` (named in {where}) is not a command; the commands: {sorted(cli.COMMANDS)}"
    )
    with pytest.raises(SystemExit) as exit_info:
        cli.main([name, "--help"])
    assert exit_info.value.code == 0, f"`slimspec {name} --help` exited with {exit_info.value.code}"
    assert "usage:" in capsys.readouterr().out


def test_every_named_repository_path_exists():
    checkout = _in_a_checkout()

    def found(path: str) -> bool:
        if checkout is None:
            return (REPO_ROOT / path).exists()
        return path.rstrip("/") in checkout

    missing = [
        f"{doc}: {path}" for doc, path in _paths() if not found(path) and not found(str(Path(doc).parent / path))
    ]
    assert not missing, "paths named in the docs that do not exist:\n" + "\n".join(missing)


def test_no_library_module_imports_scripts_or_experiments():
    """`scripts/` and `experiments/` sit beside the package: the package never reaches into them."""
    imports = re.compile(r"^\s*(?:from|import)\s+(?:scripts|experiments)\b|sys\.path.*(?:scripts|experiments)", re.M)
    offenders = [
        str(path.relative_to(REPO_ROOT))
        for path in (REPO_ROOT / "src").rglob("*.py")
        if imports.search(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, offenders
