"""Hub ids wherever a command takes a path (issue #21): `--drafter`/`--target` repo ids, a `convert`/`export` source
repo (`snapshot_download`), and `hf://datasets/ORG/NAME/PATH` data files (`hf_hub_download`), all through the real
huggingface_hub client against the loopback server (`HF_ENDPOINT`), in a fresh interpreter as in `test_hub.py`."""

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..testing_utils import (
    REPO_ROOT,
    RESULT_MARK,
    HubServer,
    L,
    eagle_checkpoint,
    hub_client_env,
    make_char_tokenizer,
    make_tiny_drafter,
    make_tiny_target,
)


TARGET_REPO, DRAFTER_REPO, EAGLE_REPO, DATA_REPO = (
    "org/ids-target",
    "org/ids-drafter",
    "org/ids-eagle3",
    "org/ids-data",
)
QUESTIONS = [
    {"question_id": i, "category": "writing", "turns": [f"Write about {word}."]} for i, word in enumerate("abc", 81)
]


def _cli(argv: list[str]) -> dict:
    from slimspec_hf import cli

    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = cli.main(argv)
    return {"rc": code, "err": err.getvalue()[-3000:], "out": out.getvalue()[-3000:]}


def _scenario_hub_ids(workdir: str) -> dict:
    work = Path(workdir)
    data_uri = f"hf://datasets/{DATA_REPO}/question.jsonl"
    common = ["--target", TARGET_REPO, "--dtype", "float32"]
    return {
        "generate": _cli(["generate", "hi", "--drafter", DRAFTER_REPO, *common, "--max-new-tokens", "4"]),
        "convert": _cli(
            [
                "convert",
                "--from",
                "eagle3",
                EAGLE_REPO,
                "--target",
                TARGET_REPO,
                "--rank",
                "4",
                "--out",
                str(work / "c"),
            ]
        ),
        "export": _cli(["export", "--to", "speculators", DRAFTER_REPO, str(work / "exported")]),
        "bench": _cli(
            ["bench", "--drafter", DRAFTER_REPO, *common, "--dataset", "mt_bench", "--data", data_uri]
            + ["--limit", "2", "--temperatures", "0", "--max-new-tokens", "4", "--timing-repeats", "1"]
            + ["--context-length", "8", "--no-progress", "--output-dir", str(work / "bench")]
        ),
        "prepare": _cli(
            ["prepare-data", "--prompts", data_uri, "--target", TARGET_REPO, "--max-new-tokens", "3"]
            + ["--max-prompts", "2", "--no-progress", "--out", str(work / "prepared")]
        ),
        "missing_repo": _cli(["generate", "hi", "--drafter", "org/no-such-drafter", *common]),
        "missing_file": _cli(["bench", "--data", f"hf://datasets/{DATA_REPO}/nope.jsonl", *common]),
        "bad_uri": _cli(["bench", "--data", "hf://datasets/org-only", *common]),
        "written": sorted(p.name for p in work.iterdir()),
    }


def _folder_files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def hub_ids(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub-ids")
    target = make_tiny_target(num_hidden_layers=L)
    target.config._name_or_path = TARGET_REPO
    tokenizer = make_char_tokenizer()
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    target.save_pretrained(root / "target")
    tokenizer.save_pretrained(root / "target")
    make_tiny_drafter(target, target_layer_ids=[2, 4, 5]).save_pretrained(root / "drafter")
    eagle, *_ = eagle_checkpoint(root, target)
    work = root / "work"
    work.mkdir()
    with HubServer() as hub:
        hub.publish(TARGET_REPO, _folder_files(root / "target"))
        hub.publish(DRAFTER_REPO, _folder_files(root / "drafter"))
        hub.publish(EAGLE_REPO, _folder_files(eagle))
        hub.publish(DATA_REPO, {"question.jsonl": "\n".join(map(json.dumps, QUESTIONS)).encode()}, repo_type="dataset")
        boot = (
            "import json, sys\n"
            f"sys.path.insert(0, {str(REPO_ROOT)!r})\n"
            "from tests.interop import test_hub_ids\n"
            f"result = test_hub_ids._scenario_hub_ids({str(work)!r})\n"
            f"print('\\n' + {RESULT_MARK!r} + json.dumps(result))\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", boot],
            env=hub_client_env(hub, tmp_path_factory.mktemp("hf-home")),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=600,
        )
        errors = list(hub.errors)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARK)]
    if proc.returncode != 0 or not lines:
        pytest.fail(f"scenario failed (rc {proc.returncode}):\n{proc.stderr[-6000:]}\n{proc.stdout[-2000:]}")
    assert not errors, errors
    return json.loads(lines[-1][len(RESULT_MARK) :]), work


def test_generate_with_drafter_and_target_by_repo_id(hub_ids):
    out, _ = hub_ids
    assert out["generate"]["rc"] == 0, out["generate"]
    assert "acceptance length" in out["generate"]["out"]


def test_convert_and_export_take_a_source_repo_id(hub_ids):
    out, work = hub_ids
    assert out["convert"]["rc"] == 0, out["convert"]
    assert (work / "c" / "config.json").is_file() and (work / "c" / "model.safetensors").is_file()
    assert out["export"]["rc"] == 0, out["export"]
    assert (work / "exported" / "config.json").is_file()


def test_bench_and_prepare_data_read_a_hub_dataset_file(hub_ids):
    out, work = hub_ids
    assert out["bench"]["rc"] == 0, out["bench"]
    report = json.loads((work / "bench" / "results.json").read_text())
    assert report["config"]["target"] == TARGET_REPO
    assert out["prepare"]["rc"] == 0, out["prepare"]
    assert "2 new" in out["prepare"]["out"]


def test_missing_hub_repo_and_file_are_one_line_errors(hub_ids):
    out, _ = hub_ids
    for key, command in (("missing_repo", "generate"), ("missing_file", "bench"), ("bad_uri", "bench")):
        result = out[key]
        assert result["rc"] == 2, result
        lines = result["err"].strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"slimspec {command}: error: "), result
        assert "Traceback" not in result["err"]
    assert "org/no-such-drafter" in out["missing_repo"]["err"]
    assert "nope.jsonl" in out["missing_file"]["err"] and "no such file" in out["missing_file"]["err"]
    assert "hf://datasets/ORG/NAME/PATH" in out["bad_uri"]["err"]
    assert sorted(out["written"]) == ["bench", "c", "exported", "prepared"]
