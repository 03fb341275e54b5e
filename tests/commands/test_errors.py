"""Bad input through the `slimspec` command: one line on stderr, `slimspec <command>: error: ...`, exit code 2, no
traceback, nothing left behind (issue #21). `--debug` / `SLIMSPEC_DEBUG=1` shows the traceback instead."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slimspec_hf import cli
from slimspec_hf.commands.common import looks_like_path

from ..testing_utils import REPO_ROOT, make_char_tokenizer, make_tiny_drafter, make_tiny_target


RECIPE = REPO_ROOT / "recipes" / "smollm2-135m-instruct" / "slimspec" / "config_embedded_v1.yaml"


def _snapshot(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def run_cli(capsys, argv, cwd: Path):
    """`(exit code, stderr)` of `slimspec ARGV` run in `cwd`; asserts the error contract and that `cwd` is unchanged."""
    before = _snapshot(cwd)
    old = Path.cwd()
    os.chdir(cwd)
    try:
        code = cli.main(list(argv))
    finally:
        os.chdir(old)
    err = capsys.readouterr().err
    # progress bars (datasets, weight loading) may precede it; the error is the one last line
    lines = [line for line in err.splitlines() if line.strip() and "it/s]" not in line and "examples/s]" not in line]
    assert code == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith(f"slimspec {argv[0]}: error: ") and err.rstrip().endswith(lines[0]), err
    assert "Traceback" not in err
    assert _snapshot(cwd) == before, "a failed command left files behind"
    return code, lines[0]


@pytest.fixture(scope="module")
def tiny_folders(tmp_path_factory):
    """A tiny target folder (with a tokenizer) and a drafter folder for it."""
    root = tmp_path_factory.mktemp("tiny")
    target = make_tiny_target()
    target.save_pretrained(root / "target")
    make_char_tokenizer().save_pretrained(root / "target")
    make_tiny_drafter(target).save_pretrained(root / "drafter")
    return root


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.delenv("SLIMSPEC_DEBUG", raising=False)
    return tmp_path


@pytest.mark.parametrize("path", ["/nonexistent", "./nope", "~/nope-drafter", "a/b/c", "org/"])
def test_missing_drafter_folder_is_named_before_transformers_sees_it(capsys, workdir, path):
    _, line = run_cli(capsys, ["generate", "hi", "--drafter", path], workdir)
    assert f"`--drafter`: no such folder: {path}" in line


def test_missing_target_folder(capsys, workdir, tiny_folders):
    _, line = run_cli(
        capsys, ["generate", "hi", "--drafter", str(tiny_folders / "drafter"), "--target", "/no/target"], workdir
    )
    assert "`--target`: no such folder: /no/target" in line


def test_hub_ids_are_not_taken_for_paths():
    assert not looks_like_path("org/name") and not looks_like_path("name")
    assert looks_like_path("/abs") and looks_like_path("./x") and looks_like_path("~/x") and looks_like_path("a/b/c")


def test_truncated_safetensors(capsys, workdir, tiny_folders, tmp_path_factory):
    broken = tmp_path_factory.mktemp("broken")
    for name in ("config.json", "model.safetensors"):
        data = (tiny_folders / "drafter" / name).read_bytes()
        (broken / name).write_bytes(data[: len(data) // 2] if name.endswith("safetensors") else data)
    argv = ["generate", "hi", "--drafter", str(broken), "--target", str(tiny_folders / "target"), "--dtype", "float32"]
    _, line = run_cli(capsys, argv, workdir)
    assert "slimspec generate: error:" in line


def test_head_rank_zero_in_a_drafter_config(capsys, workdir, tiny_folders, tmp_path_factory):
    bad = tmp_path_factory.mktemp("rank0")
    config = json.loads((tiny_folders / "drafter" / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "head_rank": 0}))
    (bad / "model.safetensors").write_bytes((tiny_folders / "drafter" / "model.safetensors").read_bytes())
    argv = ["generate", "hi", "--drafter", str(bad), "--target", str(tiny_folders / "target"), "--dtype", "float32"]
    _, line = run_cli(capsys, argv, workdir)
    assert "`head_rank` (0)" in line


def test_max_new_tokens_zero(capsys, workdir):
    _, line = run_cli(capsys, ["generate", "hi", "--drafter", "x", "--max-new-tokens", "0"], workdir)
    assert line == "slimspec generate: error: `--max-new-tokens` must be positive, got 0."


def test_unknown_recipe_key_says_did_you_mean(capsys, workdir):
    recipe = yaml.safe_load(RECIPE.read_text())
    recipe["head_rnak"] = 36
    (workdir / "bad.yaml").write_text(yaml.safe_dump(recipe))
    _, line = run_cli(capsys, ["train", "--config", "bad.yaml"], workdir)
    assert "unknown key `head_rnak` in the --config recipe; did you mean `head_rank`" in line
    assert "dataclass" not in line


def test_unknown_flag_says_did_you_mean(capsys, workdir):
    _, line = run_cli(capsys, ["train", "--config", str(RECIPE), "--lerning_rate", "1e-4"], workdir)
    assert "unknown key `lerning_rate` on the command line; did you mean `learning_rate`" in line


def test_missing_config_file(capsys, workdir):
    _, line = run_cli(capsys, ["train", "--config", "nope.yaml"], workdir)
    assert line == (
        "slimspec train: error: `--config`: no such file: nope.yaml (pass a YAML recipe, e.g. "
        "recipes/*/slimspec/*.yaml)"
    )


@pytest.mark.parametrize(
    "flag, value, hint",
    [
        ("--attn_implementation", "sdpa", "target_model_init_kwargs"),
        ("--load_in_4bit", "true", "quantised targets are not supported"),
        ("--dtype", "bfloat16", "target_dtype"),
        ("--model_revision", "main", "target_model_init_kwargs"),
        ("--model_name_or_path", "x", "target_model"),
    ],
)
def test_unused_model_config_flags_are_refused(capsys, workdir, flag, value, hint):
    _, line = run_cli(capsys, ["train", "--config", str(RECIPE), flag, value], workdir)
    assert f"`{flag[2:]}` (on the command line) is a trl ModelConfig field that `slimspec train` does not use" in line
    assert hint in line


def test_unused_model_config_key_in_a_recipe_is_refused(capsys, workdir):
    recipe = {**yaml.safe_load(RECIPE.read_text()), "attn_implementation": "sdpa"}
    (workdir / "r.yaml").write_text(yaml.safe_dump(recipe))
    _, line = run_cli(capsys, ["train", "--config", "r.yaml"], workdir)
    assert "`attn_implementation` (in the --config recipe) is a trl ModelConfig field" in line


def test_train_help_shows_only_what_it_uses(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    out = capsys.readouterr().out
    assert "--lora_r" in out and "--head_rank" in out
    for unused in ("--model_name_or_path", "--attn_implementation", "--load_in_4bit", "--model_revision"):
        assert unused not in out


def test_head_rank_zero_in_a_recipe_leaves_nothing_behind(capsys, workdir):
    data = workdir / "data.jsonl"
    data.write_text(
        json.dumps({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})
    )
    argv = ["train", "--config", str(RECIPE), "--head_rank", "0", "--dataset_path", str(data), "--output_dir", "out"]
    argv += ["--features", "online", "--max_steps", "1"]
    _, line = run_cli(capsys, argv, workdir)
    assert "`head_rank` (0)" in line


def test_bench_missing_data_file_names_the_file_it_got(capsys, workdir):
    _, line = run_cli(capsys, ["bench", "--data", "nope.jsonl"], workdir)
    assert "`--data`: no such file: nope.jsonl" in line and "pass `--data PATH`" not in line


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--top-p", "0"], "`--top-p` must be in (0, 1], got 0.0."),
        (["--top-p", "1.5"], "`--top-p` must be in (0, 1], got 1.5."),
        (["--batch-sizes", "0"], "`--batch-sizes`: got [0] with 1 --drafter; give batch sizes >= 1"),
        (["--batch-sizes", "4", "--prompt-lookup"], "`--prompt-lookup` does not run with `--batch-sizes`"),
        (["--batch-sizes", "4", "--repeats", "3"], "`--repeats` (3) is not used with `--batch-sizes`"),
    ],
)
def test_bench_refuses_settings_it_cannot_run_before_loading_anything(capsys, workdir, extra, message):
    _, line = run_cli(capsys, ["bench", "--drafter", "not/loaded", *extra], workdir)
    assert message in line


def test_convert_missing_source(capsys, workdir):
    _, line = run_cli(capsys, ["convert", "--from", "eagle3", "./nope", "--target", "embedded", "--out", "o"], workdir)
    assert "`src`: no such folder: ./nope" in line


def test_prepare_data_missing_prompts(capsys, workdir):
    _, line = run_cli(capsys, ["prepare-data", "--prompts", "nope.jsonl", "--out", "o"], workdir)
    assert "`--prompts`: no such file: nope.jsonl" in line


def test_prepare_data_vllm_engine_without_vllm(capsys, workdir, monkeypatch):
    monkeypatch.delenv("SLIMSPEC_VLLM_PYTHON", raising=False)
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("this interpreter has vLLM")
    (workdir / "p.jsonl").write_text(json.dumps({"id": "a", "turns": ["hi"]}) + "\n")
    _, line = run_cli(capsys, ["prepare-data", "--engine", "vllm", "--prompts", "p.jsonl", "--out", "o"], workdir)
    assert "`--engine vllm` needs a python with vLLM" in line and "make install-vllm" in line


def test_prepare_data_vllm_python_missing(capsys, workdir):
    (workdir / "p.jsonl").write_text(json.dumps({"id": "a", "turns": ["hi"]}) + "\n")
    argv = ["prepare-data", "--engine", "vllm", "--vllm-python", "nope/python", "--prompts", "p.jsonl", "--out", "o"]
    _, line = run_cli(capsys, argv, workdir)
    assert "`--vllm-python`: no python at 'nope/python'" in line


def test_prepare_data_vllm_engine_failure_is_one_line_with_its_log(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("SLIMSPEC_DEBUG", raising=False)
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'engine log: out of memory' >&2\nexit 3\n")
    fake.chmod(0o755)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "a", "turns": ["hi"]}) + "\n")
    argv = ["prepare-data", "--engine", "vllm", "--vllm-python", str(fake), "--prompts", str(prompts)]
    code = cli.main(argv + ["--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert "engine log: out of memory" in err[-2]
    assert "the vLLM engine failed (exit 3)" in err[-1] and "rerun the same command" in err[-1]


def test_debug_shows_the_traceback(monkeypatch, tmp_path):
    monkeypatch.delenv("SLIMSPEC_DEBUG", raising=False)
    with pytest.raises(ValueError, match="no such folder"):
        cli.main(["--debug", "generate", "hi", "--drafter", "/nonexistent"])
    assert "SLIMSPEC_DEBUG" not in os.environ  # --debug holds for that call only
    monkeypatch.setenv("SLIMSPEC_DEBUG", "1")
    with pytest.raises(ValueError, match="no such folder"):
        cli.main(["generate", "hi", "--drafter", "/nonexistent"])


def test_real_process_prints_one_line_and_exits_2(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("SLIMSPEC_DEBUG", None)
    cmd = [sys.executable, "-m", "slimspec_hf.cli", "generate", "hi", "--drafter", "/nonexistent"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "slimspec generate: error: `--drafter`: no such folder: /nonexistent (pass an existing folder or a Hub id, "
        "org/name)"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["bench-verify", "choose-rank"])
def test_other_commands_check_the_target_path_too(capsys, workdir, command):
    _, line = run_cli(capsys, [command, "--target", "/no/such/target"], workdir)
    assert "no such folder" in line and "/no/such/target" in line and "Repo id must be" not in line


def test_bench_verify_times_each_batch_size(tmp_path, capsys):
    from slimspec_hf.commands import bench_verify

    from ..testing_utils import make_char_tokenizer, make_tiny_target

    make_tiny_target().save_pretrained(tmp_path / "target")
    make_char_tokenizer().save_pretrained(tmp_path / "target")
    argv = ["--target", str(tmp_path / "target"), "--dtypes", "float32", "--max-tokens", "3", "--context", "4"]
    assert bench_verify.main([*argv, "--repeats", "1", "--batch-sizes", "1", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "T(n) float32 B=3 ms" in lines[1] and [line.split(" | ")[0] for line in lines[3:]] == ["| 1", "| 2", "| 3"]
    assert bench_verify.main([*argv, "--batch-sizes", "0"]) == 2
    assert capsys.readouterr().err.strip() == (
        "slimspec bench-verify: error: `--batch-sizes` must all be at least 1, got [0]."
    )
