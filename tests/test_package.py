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
    "heads_slimspec": 0,
    "cache_slimspec": 0,
    "generation_slimspec": 0,
    "drafting_slimspec": 0,
    "verification_slimspec": 0,
    "decoding_slimspec": 0,
    "shapes_slimspec": 0,
    "acceptance_slimspec": 0,
    "costs_slimspec": 0,
    "calls_slimspec": 0,
    "stats_slimspec": 0,
    "modeling_slimspec": 0,
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


# The one import against the layers: the drafter's `push_to_hub` override publishes through the package's publisher
# when the package is installed (a deferred import guarded by `except ImportError`: remote-code users get
# transformers' own push); `interop.hub` imports no model code, so there is no cycle (test below).
UPWARD_IMPORTS = {"modeling_slimspec": {"interop"}}


@pytest.mark.parametrize("path,parts", list(_modules()), ids=lambda v: "/".join(v) if isinstance(v, tuple) else "")
def test_no_module_imports_from_a_layer_above(path, parts):
    layer = LAYERS[parts[0]]
    allowed = UPWARD_IMPORTS.get(parts[0], set())
    above = {name for name in _imported(path, parts) if LAYERS[name] > layer and name not in allowed}
    assert not above, f"{path.relative_to(SRC)} (layer {layer}) imports from a layer above: {sorted(above)}"


def test_library_modules_carry_no_argparse_main():
    for path, parts in _modules():
        if parts[0] in ("commands", "cli"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert "main" not in functions, f"{path.relative_to(SRC)} has a `main`: it belongs in commands/"
        assert "argparse" not in path.read_text(encoding="utf-8"), f"{path.relative_to(SRC)} uses argparse"


# What a user runs from the wheel: the `slimspec` commands, and the child `prepare-data --engine vllm` starts in the
# vLLM venv. Benchmark runners, time-boxed bursts and other lab tooling live in scripts/ and experiments/.
RUNNABLE_MODULES = {"cli.py", "integrations/vllm/regenerate.py"}


def test_the_wheel_runs_only_its_commands():
    runnable = set()
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            test = node.test if isinstance(node, ast.If) else None
            if isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__":
                runnable.add(path.relative_to(SRC).as_posix())
    extra = {name for name in runnable - RUNNABLE_MODULES if not name.startswith("commands/")}
    assert not extra, f"{sorted(extra)} run as scripts: lab tooling belongs in scripts/, commands in commands/"


def test_source_files_stay_small():
    sizes = {str(p.relative_to(SRC)): len(p.read_text(encoding="utf-8").splitlines()) for p in SRC.rglob("*.py")}
    assert {name: n for name, n in sizes.items() if n > 700} == {}


def test_the_decoding_unit_stays_under_1700_lines():
    """The loop and its two sides (route, drafting, verification, decoding, the drafter's cache) read in one sitting;
    the call's statistics and the shape choice have modules of their own."""
    unit = ("generation", "drafting", "verification", "decoding", "cache")
    sizes = {name: len((SRC / f"{name}_slimspec.py").read_text(encoding="utf-8").splitlines()) for name in unit}
    assert sum(sizes.values()) <= 1700, sizes


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


def _module_imports() -> dict[str, set[str]]:
    """Every module of the package (dotted, under slimspec_hf) -> the package modules it imports, anywhere in it."""
    modules = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        if "evaluate_metrics" in parts or "custom_generate" in parts:
            continue
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        package = parts[:-1] if is_package else parts[:-1]
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = list(package[: len(package) - node.level + 1])
                target = ".".join(base + (node.module.split(".") if node.module else []))
                imported.add(target)
                imported.update(f"{target}.{a.name}" if target else a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("slimspec_hf"):
                imported.add(node.module.removeprefix("slimspec_hf").lstrip("."))
            elif isinstance(node, ast.Import):
                imported.update(
                    a.name.removeprefix("slimspec_hf.") for a in node.names if a.name.startswith("slimspec_hf.")
                )
        modules[name] = imported
    return {name: {i for i in imported if i in modules and i != name} for name, imported in modules.items()}


def test_no_import_cycle_in_the_package():
    """No module imports, directly or through others, one that imports it back (deferred imports included)."""
    graph = _module_imports()
    graph.pop("", None)  # the package root imports its public names from everywhere
    for module in graph:
        graph[module].discard("")
    cycles, state = [], {}

    def visit(module, stack):
        state[module] = "open"
        for other in sorted(graph.get(module, ())):
            if state.get(other) == "open":
                cycles.append(stack[stack.index(other) :] + [other])
            elif other not in state:
                visit(other, stack + [other])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, cycles


TESTS = Path(__file__).resolve().parent


def _files_imported_from_tests(path: Path) -> set[Path]:
    """The files under tests/ that the module `path` imports, anywhere in it (deferred imports included)."""
    package = ["tests", *path.relative_to(TESTS).parent.parts]
    files = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = base + (node.module.split(".") if node.module else [])
            candidates = [module] + [module + [alias.name] for alias in node.names]  # `from . import test_x` too
        elif isinstance(node, ast.Import):
            candidates = [alias.name.split(".") for alias in node.names]
        else:
            continue
        for parts in candidates:
            if parts[:1] == ["tests"] and len(parts) > 1:
                file = TESTS.joinpath(*parts[1:]).with_suffix(".py")
                if file.is_file():
                    files.add(file)
    return files


def test_test_modules_share_helpers_through_testing_utils_only():
    """Helpers shared by test modules live in tests/testing_utils.py (transformers' habit): no module under tests/
    imports a test module (`test_*.py`) or `conftest.py` (pytest imports those itself)."""
    imported = {path: _files_imported_from_tests(path) for path in sorted(TESTS.rglob("*.py"))}
    wrong = {}
    for path, files in imported.items():
        tests = sorted(
            str(f.relative_to(TESTS)) for f in files if f.name.startswith("test_") or f.name == "conftest.py"
        )
        if tests:
            wrong[str(path.relative_to(TESTS))] = tests
    assert wrong == {}, f"import these helpers from testing_utils.py instead: {wrong}"
    # the walk resolves relative imports: the fixtures' own helpers come from testing_utils.py
    assert TESTS / "testing_utils.py" in imported[TESTS / "conftest.py"]


def test_decoding_functions_are_short():
    """The decoding core reads at once: no function of the remote-code decoding modules over 80 lines."""
    long = {}
    for name in (
        "generation_slimspec",
        "drafting_slimspec",
        "verification_slimspec",
        "decoding_slimspec",
        "cache_slimspec",
        "stats_slimspec",
    ):
        tree = ast.parse((SRC / f"{name}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > 80:
                    long[f"{name}.{node.name}"] = length
    assert long == {}


def test_the_core_install_loads_a_drafter_and_generates(tmp_path):
    """With the extras' packages absent (trl, peft, accelerate, datasets, evaluate, matplotlib, gguf, jinja2), the
    README's quick start works: a saved drafter loads with the Auto class and `generate(..., assistant_model=)` gives
    the target's own greedy output; none of the extras was imported."""
    from .testing_utils import run_with_core_only

    result = run_with_core_only(
        f"""
        import torch, slimspec_hf
        from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
        torch.manual_seed(0)
        config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=6,
                             num_attention_heads=4, num_key_value_heads=2)
        target = LlamaForCausalLM(config).eval()
        drafter_config = slimspec_hf.SlimSpecDrafterConfig.from_target_config(config, target_layer_ids=[1, 3, 5])
        slimspec_hf.SlimSpecDrafterForCausalLM(drafter_config).save_pretrained({str(tmp_path / "d")!r})
        drafter = AutoModelForCausalLM.from_pretrained({str(tmp_path / "d")!r}).eval()
        ids = torch.randint(0, 128, (1, 8))
        plain = target.generate(ids, max_new_tokens=12, do_sample=False)
        fast = target.generate(ids, max_new_tokens=12, do_sample=False, assistant_model=drafter, num_assistant_tokens=3)
        assert fast.tolist() == plain.tolist()
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in EXTRAS)
        assert not loaded, loaded
        print("CORE-OK")
        """,
        tmp_path,
    )
    assert "CORE-OK" in result.stdout, result.stderr[-3000:]


def test_a_missing_extra_is_one_line_naming_the_pip_command(tmp_path):
    from .testing_utils import run_with_core_only

    result = run_with_core_only(
        """
        import sys
        from slimspec_hf.cli import main
        code = main(["train", "--config", "recipes/gemma-3-270m/slimspec/config_embedded_v1.yaml"])
        print("CODE:", code)
        code = main(["generate", "--target", "gemma-3-270m", "--drafter", "drafters/smollm2-135m-instruct-slimspec", "Hi"])
        print("CODE:", code)
        """,
        tmp_path,
    )
    assert result.stdout.count("CODE: 2") == 2, result.stdout + result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert lines == [
        'slimspec train: error: this needs `trl`, which is not installed: pip install "slimspec-hf[train]"',
        'slimspec generate: error: this needs `gguf`, which is not installed: pip install "slimspec-hf[gguf]"',
    ], result.stderr[-2000:]
