"""recipes/smollm2-135m-instruct/gpu.sh, run on the CPU with a tiny budget: it resumes the mix's data folder (same
run config), trains the shipped drafter a couple of steps, reports, packs what the device tool returns, and
`--unpack` puts the shard and the drafter back where the CPU pipeline takes them."""

import json
import os
import subprocess
import sys

import pytest

from ..testing_utils import REPO_ROOT


SCRIPT = REPO_ROOT / "recipes" / "smollm2-135m-instruct" / "gpu.sh"
MIX = REPO_ROOT / "data" / "smollm2-135m-instruct" / "mix_16k"


def test_the_script_parses_and_resumes_the_cpu_jobs_folder():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    text = SCRIPT.read_text()
    assert "DATA_OUT:-data/smollm2-135m-instruct/mix_16k}" in text and "--dtype bfloat16" in text
    assert json.loads((MIX / "prepare_config.json").read_text())["dtype"] == "bfloat16"


@pytest.mark.integration
def test_gpu_recipe_on_the_cpu_with_a_tiny_budget(tmp_path):
    from slimspec_hf import SlimSpecDrafterForCausalLM
    from slimspec_hf.paths import cache_dir

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        json.dumps({"id": "t1", "turns": ["Say hi."]})
        + "\n"
        + json.dumps({"id": "t2", "turns": ["What is 2 + 2?", "And 3 + 3?"]})
        + "\n"
    )
    # the mix's own run config, but for max_new_tokens: a different dtype or seed in gpu.sh would be refused here
    data_out = tmp_path / "mix"
    data_out.mkdir()
    config = json.loads((MIX / "prepare_config.json").read_text())
    (data_out / "prepare_config.json").write_text(json.dumps({**config, "max_new_tokens": 8}))
    out = tmp_path / "out"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "SLIMSPEC_PYTHON": sys.executable,
        "SLIMSPEC_CACHE": str(cache_dir()),  # the dequantised embedded target, reused
        "DEVICE": "cpu",
        "BUDGET_S": "400",
        "RESERVE_S": "10",
        "DATA_SHARE": "0.5",
        "PROMPTS": str(prompts),
        "MAX_PROMPTS": "2",
        "MAX_NEW_TOKENS": "8",
        "GEN_BATCH": "2",
        "DATA_OUT": str(data_out),
        "TRAIN_DATA": str(data_out),
        "OUTPUT_DIR": str(tmp_path / "drafter"),
        "MAX_STEPS": "2",
        "BATCH": "1",
        "MAX_LENGTH": "128",
        "LOGGING_STEPS": "1",
        "OUT": str(out),
    }
    run = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]

    shards = list((data_out / "data").glob("shard-*.jsonl"))
    assert len(shards) == 1 and len(shards[0].read_text().splitlines()) == 2
    drafter = SlimSpecDrafterForCausalLM.from_pretrained(tmp_path / "drafter")
    assert drafter.config.head_rank == 72  # the shipped r = d/8 drafter, warm-started
    summary = json.loads((out / "summary.json").read_text())
    assert summary["data"]["new_conversations"] == 2
    assert summary["train"]["steps"] == 2 and summary["train"]["tokens"] > 0
    assert summary["train"]["tokens_per_s"] > 0 and [row["step"] for row in summary["train"]["curve"]] == [1, 2]
    assert (out / "summary.md").is_file() and (out / "gpu.log").is_file()
    returned = sorted(p.name for p in out.iterdir())
    assert len(returned) <= 8 and all(p.stat().st_size <= 16 * 2**20 for p in out.iterdir())  # the tool's limits

    # here, afterwards: the returned parts put the shard and the drafter where the CPU pipeline takes them
    back = {"DATA_OUT": str(tmp_path / "back" / "mix"), "OUTPUT_DIR": str(tmp_path / "back" / "drafter")}
    subprocess.run(["bash", str(SCRIPT), "--unpack", str(out)], env={**os.environ, **back}, check=True)
    assert (tmp_path / "back" / "mix" / "data" / shards[0].name).read_bytes() == shards[0].read_bytes()
    model = "model.safetensors"
    assert (tmp_path / "back" / "drafter" / model).read_bytes() == (tmp_path / "drafter" / model).read_bytes()
