"""τ, ρτ, ν, κ helpers, the timing breakdown, model-index entries, and the `evaluate` modules."""

import math
import time
from pathlib import Path

import pytest
import torch

import slimspec_hf
from slimspec_hf import SlimSpecGenerationStats
from slimspec_hf.evaluation.cost_model import nu_macs
from slimspec_hf.evaluation.metrics import (
    acceptance_length,
    acceptance_rate_from_tau,
    kappa,
    low_rank_head,
    measure_round_costs,
    model_index_entry,
    nu,
    pooled_acceptance_length,
    rho_tau,
    tau_from_acceptance_rate,
    time_heads,
)

from ..testing_utils import make_tiny_drafter, make_tiny_target


METRICS_DIR = Path(slimspec_hf.__file__).parent / "evaluation" / "evaluate_metrics"


def test_acceptance_length_and_pooling():
    assert acceptance_length(6, 2) == pytest.approx(4.0)
    assert acceptance_length([6, 2], [2, 2]) == pytest.approx(3.0)  # pooled, not the mean of 4 and 2
    assert math.isnan(acceptance_length(0, 0))
    stats = SlimSpecGenerationStats(rounds=3, drafted_tokens=18, accepted_tokens=9)
    assert pooled_acceptance_length([stats, {"accepted_tokens": 1, "rounds": 1}]) == pytest.approx(14 / 4)
    with pytest.raises(ValueError, match="non-negative"):
        acceptance_length(-1, 2)


def test_ratios():
    assert rho_tau(3.96, 4.0) == pytest.approx(0.99)
    assert nu(0.21e-3, 1e-3) == pytest.approx(0.21)
    assert kappa(1e-3, 24e-3, num_assistant_tokens=6) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="`tau_full`"):
        rho_tau(3.0, 0.0)
    with pytest.raises(ValueError, match="`t_non_head`"):
        kappa(1.0, 0.0)
    assert nu_macs(72, 576, 49152) == pytest.approx(72 * (576 + 49152) / (576 * 49152))
    with pytest.raises(ValueError, match="`rank` \\(0\\)"):
        nu_macs(0, 576, 49152)


def test_chain_model_round_trip():
    assert tau_from_acceptance_rate(0.0, 6) == 1.0 and tau_from_acceptance_rate(1.0, 6) == 7.0
    assert tau_from_acceptance_rate(0.5, 2) == pytest.approx(1.75)
    assert acceptance_rate_from_tau(tau_from_acceptance_rate(0.8, 6), 6) == pytest.approx(0.8, abs=1e-9)
    with pytest.raises(ValueError, match="k \\+ 1 = 7"):
        acceptance_rate_from_tau(7.5, 6)


def test_model_index_entry_leaves_out_what_was_not_measured():
    entry = model_index_entry(acceptance_length=3.4, rho_tau=0.99, speedup=2.1, nu=0.21, kappa=None)
    assert entry == {
        "dataset": "Spec-Bench",
        "temperature": 0.0,
        "acceptance_length": 3.4,
        "rho_tau": 0.99,
        "speedup": 2.1,
        "nu": 0.21,
    }
    assert "rho_tau" not in model_index_entry(acceptance_length=2.0, rho_tau=float("nan"))


def test_time_heads_is_relative_to_a_dense_head():
    d, vocab = 32, 4096
    times = time_heads({"r4": low_rank_head(d, vocab, 4), "r16": low_rank_head(d, vocab, 16)}, d, vocab, repeats=5)
    assert times["full"]["nu"] == 1.0
    for name in ("r4", "r16"):
        assert times[name]["t_head"] > 0 and times[name]["nu"] == pytest.approx(
            times[name]["t_head"] / times["full"]["t_head"]
        )


def test_measure_round_costs_breakdown():
    target = make_tiny_target()
    drafter = make_tiny_drafter(target, ttt_steps=4)  # k defaults to the training depth
    costs = measure_round_costs(target, drafter, context_length=16, repeats=2, warmup=1)
    for key in ("t_head", "t_head_full", "t_backbone", "t_verify"):
        assert costs[key] > 0, key
    assert costs["num_assistant_tokens"] == 4
    assert costs["t_non_head"] == pytest.approx(costs["t_verify"] + 4 * costs["t_backbone"])
    assert costs["kappa"] == pytest.approx(4 * costs["t_head_full"] / costs["t_non_head"])
    assert costs["nu"] == pytest.approx(costs["t_head"] / costs["t_head_full"])
    assert costs["nu_first"] == pytest.approx(costs["t_head_first"] / costs["t_head_full_first"])
    # the caches are cropped back after each timing: timing again works and the drafter still generates
    measure_round_costs(target, drafter, context_length=16, repeats=1, warmup=0, num_assistant_tokens=2)
    out = target.generate(torch.tensor([[5, 6, 7]]), max_new_tokens=4, do_sample=False, assistant_model=drafter)
    assert out.shape == (1, 7)


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_EVALUATE_OFFLINE", "1")


def test_evaluate_acceptance_length_module(offline):
    import evaluate

    metric = evaluate.load(str(METRICS_DIR / "acceptance_length"))
    result = metric.compute(accepted_tokens=[6, 2], rounds=[2, 2])
    assert result["acceptance_length"] == pytest.approx(acceptance_length([6, 2], [2, 2]))
    for accepted, rounds in ((6, 2), (2, 2)):
        metric.add(accepted_tokens=accepted, rounds=rounds)
    assert metric.compute()["acceptance_length"] == pytest.approx(3.0)


def test_evaluate_rho_tau_module(offline):
    import evaluate

    metric = evaluate.load(str(METRICS_DIR / "rho_tau"))
    result = metric.compute(
        accepted_tokens=[4, 5], rounds=[2, 2], reference_accepted_tokens=[6, 6], reference_rounds=[2, 2]
    )
    assert result["rho_tau"] == pytest.approx(rho_tau(acceptance_length(9, 4), acceptance_length(12, 4)))
    with pytest.raises(ValueError, match="reference"):
        metric.compute(accepted_tokens=[1], rounds=[1], reference_accepted_tokens=[0], reference_rounds=[0])


def test_the_heads_are_timed_in_a_chain_round_the_first_step_right_after_the_targets_pass():
    """A head that is slow right after the target's pass and fast after a drafter step (a weight in the last-level
    cache) must show both: `t_head_first` the slow step, `t_head` the mean over the k steps of a round."""
    target = make_tiny_target()
    drafter = make_tiny_drafter(target, ttt_steps=4)
    head, last = drafter.lm_head, {"target": False}

    class ColdAfterTheTarget(torch.nn.Module):
        def forward(self, hidden):
            if last["target"]:
                time.sleep(0.02)
            last["target"] = False
            return head(hidden)

    def marks(module, args, kwargs, output):
        last["target"] = True

    target.register_forward_hook(marks, with_kwargs=True)
    drafter.lm_head = ColdAfterTheTarget()
    costs = measure_round_costs(target, drafter, context_length=16, repeats=3, warmup=1, num_assistant_tokens=4)
    assert costs["t_head_first"] > 0.019
    assert costs["t_head"] == pytest.approx(costs["t_head_first"] / 4, rel=0.25)
    assert costs["nu_first"] > 2 * costs["nu"]
