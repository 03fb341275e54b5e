# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""The house rules of the package: layers, light import, commands apart from the library, small files."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest


SRC = Path(__file__).resolve().parents[1] / "src" / "slimspec_hf"
# bottom to top: a module may import from its own layer and the ones below, never from one above
LAYERS = {
    "configuration_slimspec": 0,
    "modeling_slimspec": 0,
    "generation_slimspec": 0,
    "utils": 1,
    "paths": 1,
    "targets": 1,
    "training": 2,
    "evaluation": 3,
    "interop": 4,
    "commands": 5,
    "cli": 5,
}


def _modules():
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        if parts[0] in LAYERS and "evaluate_metrics" not in parts:
            yield path, parts


def _imported(path: Path, parts: tuple[str, ...]) -> set[str]:
    """Top-level names under slimspec_hf (`training`, `targets`, ...) that a module imports."""
    package = parts[:-1]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - node.level + 1])
                target = base + (node.module.split(".") if node.module else [])
                if target:
                    names.add(target[0])
                else:  # `from .. import x` at the package root
                    names.update(alias.name for alias in node.names)
            elif node.module and node.module.startswith("slimspec_hf."):
                names.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            names.update(a.name.split(".")[1] for a in node.names if a.name.startswith("slimspec_hf."))
    return {name for name in names if name in LAYERS}


@pytest.mark.parametrize("path,parts", list(_modules()), ids=lambda v: "/".join(v) if isinstance(v, tuple) else "")
def test_no_module_imports_from_a_layer_above(path, parts):
    layer = LAYERS[parts[0]]
    above = {name for name in _imported(path, parts) if LAYERS[name] > layer}
    assert not above, f"{path.relative_to(SRC)} (layer {layer}) imports from a layer above: {sorted(above)}"


def test_library_modules_carry_no_argparse_main():
    for path, parts in _modules():
        if parts[0] in ("commands", "cli"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert "main" not in functions, f"{path.relative_to(SRC)} has a `main`: it belongs in commands/"
        assert "argparse" not in path.read_text(encoding="utf-8"), f"{path.relative_to(SRC)} uses argparse"


def test_source_files_stay_small():
    sizes = {str(p.relative_to(SRC)): len(p.read_text(encoding="utf-8").splitlines()) for p in SRC.rglob("*.py")}
    assert {name: n for name, n in sizes.items() if n > 700} == {}


def test_every_subcommand_has_its_own_module():
    from slimspec_hf.cli import COMMANDS

    for name, (target, _) in COMMANDS.items():
        module = target.split(":")[0]
        assert module.startswith("slimspec_hf.commands."), (name, module)
        assert (SRC / "commands" / f"{module.rsplit('.', 1)[-1]}.py").is_file(), name


def test_import_is_light_and_the_training_pair_is_lazy():
    code = (
        "import sys, slimspec_hf\n"
        "heavy = [m for m in ('trl', 'datasets', 'slimspec_hf.training.trainer') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "from slimspec_hf import SlimSpecConfig, SlimSpecTrainer\n"
        "assert SlimSpecTrainer.__module__ == 'slimspec_hf.training.trainer'\n"
        "assert SlimSpecConfig.__module__ == 'slimspec_hf.training.config'\n"
        "assert 'SlimSpecTrainer' in dir(slimspec_hf)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
