# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`make test-mutations`: proves the suite catches each deliberate break in `tests/mutations/mutants_*.py`.

For every mutant: copy `src/slimspec_hf` to a temporary folder, apply the mutant's edits there (each must match the
source exactly once, else the mutant no longer applies and the run fails), and run the mutant's tests with that copy
first on `PYTHONPATH`. A mutant is caught when pytest reports a failed test; it survives when its tests pass, and it
is invalid when pytest cannot even collect them (a mutant must break behaviour, not imports); a mutant marked `each`
is caught only when every one of its tests fails. First, the control:
every test named by any mutant must pass on the unmodified copy. Exit status 0 only when the control passes and
every mutant is caught.

    python -m tests.mutations.run                 # all (≈ 20 minutes on 2 cores)
    python -m tests.mutations.run --list
    python -m tests.mutations.run -k lookup       # the mutants whose name contains "lookup"
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.mutations.mutant import Mutant


REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "slimspec_hf"


def all_mutants() -> list[Mutant]:
    """Every `MUTANTS` list of the `mutants_*` modules beside this file, in module order."""
    mutants: list[Mutant] = []
    folder = Path(__file__).parent
    for info in sorted(pkgutil.iter_modules([str(folder)]), key=lambda m: m.name):
        if info.name.startswith("mutants_"):
            mutants += importlib.import_module(f"tests.mutations.{info.name}").MUTANTS
    names = [m.name for m in mutants]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise SystemExit(f"mutant names must be unique; repeated: {sorted(duplicates)}")
    return mutants


def copy_package(workdir: Path) -> Path:
    src = workdir / "src"
    shutil.copytree(PACKAGE, src / "slimspec_hf", ignore=shutil.ignore_patterns("__pycache__"))
    return src


def apply(mutant: Mutant, src: Path) -> str | None:
    """Applies the edits in `src`; returns why one does not apply, or None."""
    for edit in mutant.edits:
        path = src / "slimspec_hf" / edit.file
        if not path.is_file():
            return f"{edit.file}: no such file"
        text = path.read_text(encoding="utf-8")
        count = text.count(edit.old)
        if count != 1:
            return f"{edit.file}: the text to replace occurs {count} times (must be once): {edit.old[:60]!r}"
        path.write_text(text.replace(edit.old, edit.new), encoding="utf-8")
    return None


def pytest(tests: list[str], src: Path, first_failure: bool) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", "--timeout=900"]
    command += ["-x"] if first_failure else []
    done = subprocess.run(command + tests, cwd=REPO, env=env, capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr


def run_mutant(mutant: Mutant) -> tuple[str, str, float]:
    """(verdict, detail, seconds): verdict is caught, SURVIVED, or INVALID."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="slimspec-mutant-") as tmp:
        src = copy_package(Path(tmp))
        problem = apply(mutant, src)
        if problem is not None:
            return "INVALID", f"does not apply: {problem}", time.perf_counter() - start
        code, output = pytest(list(mutant.tests), src, first_failure=not mutant.each)
    seconds = time.perf_counter() - start
    failed = re.findall(r"^FAILED (\S+)", output, flags=re.M)
    if code == 0:
        return "SURVIVED", "its tests passed", seconds
    if mutant.each and code == 1 and "ERROR collecting" not in output:
        missed = [t for t in mutant.tests if not any(f.startswith(t) for f in failed)]
        if missed:
            return "SURVIVED", f"{len(missed)} of its tests passed: {', '.join(missed)}", seconds
        return "caught", f"by each of its {len(mutant.tests)} tests", seconds
    if code == 1 and failed and "ERROR collecting" not in output:
        return "caught", failed[0], seconds
    tail = " | ".join(output.strip().splitlines()[-3:])
    return "INVALID", f"pytest exit {code} without a failed test: {tail[:300]}", seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", dest="keyword", default=None, help="only the mutants whose name contains this")
    parser.add_argument("--list", action="store_true", help="list the mutants and their tests, run nothing")
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at once (one pytest process each)")
    parser.add_argument("--no-control", action="store_true", help="skip the run on the unmodified copy")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        print(f"--jobs must be ≥ 1, got {args.jobs}.", file=sys.stderr)
        return 2
    mutants = all_mutants()
    if args.keyword:
        mutants = [m for m in mutants if args.keyword.lower() in m.name.lower()]
        if not mutants:
            print(f"-k: no mutant name contains {args.keyword!r}; `--list` shows them.", file=sys.stderr)
            return 2
    if args.list:
        for m in mutants:
            print(f"{m.name}\n    {' '.join(m.tests)}")
        return 0

    if not args.no_control:
        tests = sorted({t for m in mutants for t in m.tests})
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="slimspec-control-") as tmp:
            code, output = pytest(tests, copy_package(Path(tmp)), first_failure=False)
        print(
            f"control (unmodified package, {len(tests)} test targets): exit {code}, {time.perf_counter() - start:.0f} s"
        )
        if code != 0:
            print(output[-4000:])
            print("the control must pass: a mutant's tests fail without any mutation.")
            return 1

    print(f"{len(mutants)} mutants, {args.jobs} at a time")
    results = {}
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_mutant, m): m for m in mutants}
        for future in futures:
            mutant = futures[future]
            verdict, detail, seconds = future.result()
            results[mutant.name] = verdict
            print(f"[{verdict:>8}] {mutant.name}  ({seconds:.0f} s) — {detail}", flush=True)
    caught = sum(v == "caught" for v in results.values())
    print(f"{caught} of {len(results)} mutants caught")
    return 0 if caught == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
