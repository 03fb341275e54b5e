"""Drafter and target on a device and in a dtype: the tests `scripts/gpu_check.py` runs on `cuda`, on the CPU in CI.

Every test here takes the `device` fixture (cpu unless `SLIMSPEC_TEST_DEVICE` / `--device` say otherwise) and is
marked `device`. Lossless decoding is asserted in fp32; in bf16/fp16 the batched verification rounds differently
from one-token decoding, so greedy agreement there is measured and reported (`device_report`), not asserted.
"""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from slimspec_hf import SlimSpecDrafterForCausalLM
from slimspec_hf.verification_slimspec import check_drafter_placement

from .testing_utils import (
    CHI2_999,
    HEAD_CONFIGS,
    chi_square,
    exact_marginals,
    make_tiny_drafter,
    make_tiny_target,
    run_without_package,
)


pytestmark = pytest.mark.device

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _pair(device, dtype, head="low_rank", seed=0):
    """A tiny target and its drafter, both on `device` in `dtype` (the drafter follows the target)."""
    target = make_tiny_target(seed=seed).to(device=device, dtype=dtype)
    drafter = make_tiny_drafter(target, **HEAD_CONFIGS[head])
    if head == "trimmed":
        drafter.lm_head.set_token_ids(torch.arange(40) * 3, dense_weight=target.lm_head.weight.float().cpu())
    return target, drafter.to(device=target.device, dtype=target.dtype)


def _prefix_agreement(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


@pytest.mark.parametrize("head", ["low_rank", "full", "trimmed"])
def test_greedy_identity_in_fp32_on_the_device(device, head, device_report):
    target, drafter = _pair(device, torch.float32, head)
    ids = torch.randint(0, 128, (1, 6), generator=torch.Generator().manual_seed(0)).to(device)
    plain = target.generate(ids, max_new_tokens=24, do_sample=False)
    spec = target.generate(ids, max_new_tokens=24, do_sample=False, assistant_model=drafter)
    assert spec.device == ids.device
    assert drafter.last_generation_stats.rounds > 0
    device_report(device=str(device), dtype="float32", head=head, identical=spec.tolist() == plain.tolist())
    assert spec.tolist() == plain.tolist()


# In bf16/fp16 a token may flip only where the target's top two logits are this close (the tiny target's logits
# spread ≈ 0.11; a flip to an unrelated token is ≈ 0.2 or more below the maximum).
LOW_PRECISION_LOGIT_GAP = 0.03


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
def test_drafter_and_target_run_in_low_precision_and_report_greedy_agreement(device, dtype_name, device_report):
    """Greedy agreement with the target alone is reported, not asserted (batched verification rounds differently);
    what is asserted: every token emitted is the target's greedy choice after its own prefix, up to rounding (its
    logit within `LOW_PRECISION_LOGIT_GAP` of the maximum, in one forward of the target in that dtype)."""
    dtype = DTYPES[dtype_name]
    target, drafter = _pair(device, dtype, "low_rank")
    assert drafter.dtype == target.dtype == dtype and drafter.device == target.device
    agreement, identical, gaps = [], [], []
    for seed in range(3):  # SlimSpec drafting is batch-1: one prompt per call
        ids = torch.randint(0, 128, (1, 6), generator=torch.Generator().manual_seed(seed)).to(device)
        plain = target.generate(ids, max_new_tokens=24, do_sample=False)
        spec = target.generate(ids, max_new_tokens=24, do_sample=False, assistant_model=drafter)
        assert spec.shape == plain.shape and spec.device == ids.device
        assert torch.equal(spec[:, :6], ids)
        stats = drafter.last_generation_stats
        assert stats.rounds > 0 and stats.drafted_tokens > 0, stats
        with torch.no_grad():
            logits = target(spec).logits[0, 5:-1].float()  # (24, V): what the target predicts for each new token
        chosen = logits.gather(-1, spec[0, 6:, None])[:, 0]
        gaps.append(float((logits.max(-1).values - chosen).max()))
        agreement.append(_prefix_agreement(plain[0, 6:].tolist(), spec[0, 6:].tolist()))
        identical.append(spec.tolist() == plain.tolist())
    device_report(
        device=str(device),
        dtype=dtype_name,
        identical=identical,
        agreeing_prefix=agreement,
        new_tokens=24,
        max_logit_gap=gaps,
    )
    assert max(gaps) <= LOW_PRECISION_LOGIT_GAP, gaps


def test_sampling_matches_the_target_distribution_on_the_device(device, device_report):
    target = make_tiny_target(seed=21, vocab_size=12)
    with torch.no_grad():
        target.lm_head.weight.mul_(8)  # a peaked, non-uniform target distribution
    drafter = make_tiny_drafter(target, head_type="full", seed=4)
    with torch.no_grad():
        drafter.lm_head.weight.copy_(target.lm_head.weight + 0.5 * torch.randn_like(target.lm_head.weight))
    prompt = torch.tensor([[1, 5, 3]])
    exact = exact_marginals(target, prompt, 3)  # on the CPU, in fp32: the reference
    target, drafter = target.to(device), drafter.to(device)
    torch.manual_seed(0)
    counts = torch.zeros(3, 12)
    for _ in range(800):
        out = target.generate(
            prompt.to(device),
            max_new_tokens=3,
            do_sample=True,
            top_k=0,
            assistant_model=drafter,
            num_assistant_tokens=2,
        )
        for j in range(3):
            counts[j, out[0, prompt.shape[1] + j].item()] += 1
    assert drafter.last_generation_stats.drafted_tokens > 0
    stats = [chi_square(counts[j], exact[j]) for j in (1, 2)]  # tokens 2 and 3 pass the acceptance rule
    device_report(device=str(device), chi_square=[s for s, _ in stats], dof=[d for _, d in stats])
    for stat, dof in stats:
        assert stat < CHI2_999[dof - 1], (stat, dof)


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_save_load_round_trip_with_device_map(device, dtype_name, tmp_path):
    dtype = DTYPES[dtype_name]
    target, drafter = _pair(device, dtype)
    drafter.save_pretrained(tmp_path / "drafter")
    target.save_pretrained(tmp_path / "target")
    target2 = AutoModelForCausalLM.from_pretrained(tmp_path / "target", dtype=dtype, device_map=str(device)).eval()
    drafter2 = AutoModelForCausalLM.from_pretrained(tmp_path / "drafter", dtype=dtype, device_map=str(device)).eval()
    assert isinstance(drafter2, SlimSpecDrafterForCausalLM)
    assert drafter2.device.type == device.type and drafter2.dtype == dtype
    for (name, a), (_, b) in zip(drafter.state_dict().items(), drafter2.state_dict().items()):
        assert torch.equal(a, b), name
    ids = torch.randint(0, 128, (1, 5), generator=torch.Generator().manual_seed(2)).to(device)
    first = target.generate(ids, max_new_tokens=12, do_sample=False, assistant_model=drafter)
    second = target2.generate(ids, max_new_tokens=12, do_sample=False, assistant_model=drafter2)
    assert first.tolist() == second.tolist()


def test_remote_code_on_the_device(device, tmp_path):
    target, drafter = _pair(device, torch.float32)
    drafter.save_pretrained(tmp_path / "drafter")
    target.save_pretrained(tmp_path / "target")
    ids = torch.randint(0, 128, (1, 6), generator=torch.Generator().manual_seed(3))
    expected = target.generate(ids.to(device), max_new_tokens=12, do_sample=False)[0].tolist()
    script = f"""
        import torch
        from transformers import AutoModelForCausalLM
        device = {str(device)!r}
        drafter = AutoModelForCausalLM.from_pretrained({str(tmp_path / "drafter")!r}, trust_remote_code=True)
        assert type(drafter).__module__.startswith("transformers_modules"), type(drafter).__module__
        target = AutoModelForCausalLM.from_pretrained({str(tmp_path / "target")!r}).to(device).eval()
        drafter = drafter.to(device).eval()
        out = target.generate(torch.tensor({ids.tolist()}, device=device), max_new_tokens=12, do_sample=False,
                              assistant_model=drafter)
        assert out[0].tolist() == {expected}, out
        assert drafter.last_generation_stats.rounds > 0
        print("REMOTE-OK")
        """
    run_without_package(script, tmp_path)


def test_a_drafter_on_another_device_is_refused_with_both_devices_named(device):
    target, drafter = _pair(device, torch.float32)
    check_drafter_placement(target, drafter)  # same device: nothing to say
    elsewhere = drafter.to("meta")  # another device that every machine has
    with pytest.raises(ValueError, match=r"drafter is on meta but the target is on .*drafter\.to\(target\.device\)"):
        check_drafter_placement(target, elsewhere)


def test_generate_refuses_a_drafter_on_another_device(device):
    target, drafter = _pair(device, torch.float32)
    ids = torch.randint(0, 128, (1, 5), generator=torch.Generator().manual_seed(4)).to(device)
    with pytest.raises(ValueError, match=r"drafter is on meta but the target is on"):
        target.generate(ids, max_new_tokens=8, do_sample=False, assistant_model=drafter.to("meta"))


@pytest.mark.integration
def test_smollm2_with_its_drafter_on_the_device(device, device_report):
    """The shipped drafter follows the embedded target to the device: identical greedy text in fp32, and how far
    bf16 agrees with the target alone (reported)."""
    from slimspec_hf import load_embedded_target
    from slimspec_hf.targets import load_embedded_drafter

    results = {}
    for dtype_name in ("float32", "bfloat16"):
        target, tokenizer = load_embedded_target(dtype=DTYPES[dtype_name], device=device)
        drafter = load_embedded_drafter(target=target)
        assert drafter.device == target.device and drafter.dtype == target.dtype
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "Name three primary colours."}], tokenize=False, add_generation_prompt=True
        )
        inputs = tokenizer(text, return_tensors="pt").to(device)
        plain = target.generate(**inputs, max_new_tokens=32, do_sample=False)
        spec = target.generate(**inputs, max_new_tokens=32, do_sample=False, assistant_model=drafter)
        stats = drafter.last_generation_stats
        new = inputs["input_ids"].shape[1]
        results[dtype_name] = {
            "identical": spec.tolist() == plain.tolist(),
            "agreeing_prefix": _prefix_agreement(plain[0, new:].tolist(), spec[0, new:].tolist()),
            "tau": stats.acceptance_length,
        }
        del target, drafter
    device_report(device=str(device), smollm2=json.loads(json.dumps(results, default=str)))
    assert results["float32"]["identical"], results
