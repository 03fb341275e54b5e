"""Automatic rank selection: a synthetic head with a known spectral knee, the proxy fit, the ρτ model, the CLI."""

import json

import pytest
import torch

from slimspec_hf.commands.choose_rank import main
from slimspec_hf.evaluation.cost_model import speedup
from slimspec_hf.evaluation.metrics import tau_from_acceptance_rate
from slimspec_hf.evaluation.rank_selection import (
    AdaptedHead,
    assumed_rho_tau,
    choose_rank,
    default_ranks,
    drafter_head_weight,
    drafter_states_from_sequences,
    fit_proxy,
    head_inputs_from_sequences,
    load_head_weight,
    measure_nu,
    rho_tau_from_agreements,
    token_weights_from_logits,
)
from slimspec_hf.training.head_init import activation_aware_factors, second_moment

from ..testing_utils import make_tiny_drafter


def knee_head(d=32, vocab=256, knee=8, seed=0):
    """A V×d head whose spectrum falls off a cliff after `knee` singular values."""
    g = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(vocab, d, generator=g))
    v, _ = torch.linalg.qr(torch.randn(d, d, generator=g))
    s = torch.cat([torch.linspace(10, 6, knee), torch.full((d - knee,), 0.01)])
    return (u * s) @ v.T, torch.randn(800, d, generator=g)


def test_rank_selection_picks_the_spectral_knee():
    weight, states = knee_head()
    ranks = [4, 8, 12, 16]
    nu_by_rank = measure_nu(32, 256, ranks, mode="macs")  # deterministic ν for the test
    best, rows, reference = choose_rank(ranks, nu_by_rank, kappa=1.0, weight=weight, hidden_states=states, steps=30)
    assert best.rank == 8
    assert reference.agreement == 1.0  # the full head on its own inputs, φ = identity at start: exact
    by_rank = {row.rank: row for row in rows}
    assert by_rank[8].energy > 0.999 > by_rank[4].energy
    assert by_rank[4].agreement < 0.8 < by_rank[8].agreement  # below the knee the top-1 breaks
    assert all(b.agreement >= a.agreement - 0.02 for a, b in zip(rows, rows[1:]))  # monotone in r, up to noise
    for row in rows:
        assert row.relative_agreement == pytest.approx(row.agreement / reference.agreement)
        assert row.agreement >= row.svd_agreement - 0.1  # held-out test positions: at most noise below the start
        assert row.predicted_speedup == pytest.approx(speedup(row.rho_tau, row.nu, 1.0))


def test_rank_selection_with_proxy_states_fits_the_full_head_too():
    weight, states = knee_head(d=32, vocab=128, knee=32)
    g = torch.Generator().manual_seed(3)
    proxy = states + 0.5 * torch.tanh(states @ torch.randn(32, 32, generator=g) / 32**0.5)  # a "lower layer"
    ranks = [4, 16]
    best, rows, reference = choose_rank(
        ranks,
        measure_nu(32, 128, ranks, mode="macs"),
        kappa=1.0,
        weight=weight,
        hidden_states=states,
        proxy_states=proxy,
        steps=40,
    )
    # the shared deficit: the full head no longer agrees everywhere at the start, and its fit recovers some of it
    assert reference.initial_agreement < 1.0
    assert reference.agreement >= reference.initial_agreement - 0.05
    assert reference.validation_agreement >= reference.initial_validation_agreement
    by_rank = {row.rank: row for row in rows}
    assert by_rank[4].agreement < by_rank[16].agreement
    assert by_rank[4].rho_tau < by_rank[16].rho_tau
    with pytest.raises(ValueError, match="same positions"):
        choose_rank(ranks, {4: 0.1, 16: 0.3}, 1.0, weight=weight, hidden_states=states, proxy_states=proxy[:10])


def test_fit_never_returns_worse_than_its_start_on_validation():
    weight, states = knee_head(d=32, vocab=128, knee=32)
    logits = states @ weight.T
    top1 = logits.argmax(-1)
    down, up = activation_aware_factors(
        weight, second_moment(states[:600]), 12, token_weights=token_weights_from_logits(logits[:600])
    )
    splits = dict(
        train_inputs=states[:600],
        train_teacher_logprobs=torch.log_softmax(logits[:600], -1),
        val_inputs=states[600:700],
        val_top1=top1[600:700],
        test_inputs=states[700:],
        test_top1=top1[700:],
    )
    # a step far too large: every checkpoint is worse, so the start comes back unchanged
    head = AdaptedHead(down, up)
    wild = fit_proxy(head, **splits, steps=20, lr=50.0, eval_every=1)
    assert wild.best_step == 0
    assert wild.validation_agreement == wild.initial_validation_agreement
    assert wild.agreement == wild.initial_agreement
    assert torch.equal(head.matrices[0], down) and torch.equal(head.map_out, torch.zeros(32, 32))
    # the default step improves the rank-12 head and keeps the best validation checkpoint
    tame = fit_proxy(AdaptedHead(down, up), **splits, steps=40)
    assert tame.validation_agreement >= tame.initial_validation_agreement
    assert tame.best_step > 0


def test_token_weighted_factors_keep_more_top1_than_unweighted():
    g = torch.Generator().manual_seed(1)
    # a head where 16 frequent tokens carry the probability mass and 240 others compete for rank
    weight = torch.randn(256, 32, generator=g)
    weight[:16] *= 4.0
    states = torch.randn(1000, 32, generator=g)
    logits = states @ weight.T
    top1 = logits.argmax(-1)
    weights = token_weights_from_logits(logits[:600])
    assert weights.shape == (256,) and weights.min() >= 1 / 256
    agree = lambda f: float(((states[600:] @ f[0].T @ f[1].T).argmax(-1) == top1[600:]).float().mean())  # noqa: E731
    weighted = agree(activation_aware_factors(weight, second_moment(states[:600]), 8, token_weights=weights))
    plain = agree(activation_aware_factors(weight, second_moment(states[:600]), 8))
    assert weighted > plain
    with pytest.raises(ValueError, match="token_weights"):
        activation_aware_factors(weight, second_moment(states), 8, token_weights=weights[:10])


def test_head_inputs_from_sequences_tiny_target(tiny_target):
    sequences = [torch.randint(128, (9,)), torch.randint(128, (5,))]
    heads, proxies = head_inputs_from_sequences(tiny_target, sequences, proxy_layers=2)
    assert heads.shape == proxies.shape == (14, 32)
    with torch.no_grad():
        logits = tiny_target(input_ids=sequences[0].view(1, -1)).logits[0]
        hidden = tiny_target(input_ids=sequences[0].view(1, -1), output_hidden_states=True).hidden_states
    assert torch.allclose(heads[:9] @ tiny_target.lm_head.weight.T, logits, atol=1e-5)
    # hidden_states[i] is the input of layer i: the output of layer 6 - 1 - 2 = 3 is hidden_states[4]
    assert torch.allclose(proxies[:9], tiny_target.model.norm(hidden[4])[0], atol=1e-5)
    same, own = head_inputs_from_sequences(tiny_target, sequences, proxy_layers=0)
    assert torch.equal(same, own) and torch.allclose(same, heads)
    with pytest.raises(ValueError, match="proxy_layers"):
        head_inputs_from_sequences(tiny_target, sequences, proxy_layers=6)


def test_drafter_states_pair_the_drafters_state_with_the_targets_next_position(tiny_target):
    drafter = make_tiny_drafter(tiny_target)
    sequences = [torch.randint(128, (9,)), torch.randint(128, (1,)), torch.randint(128, (5,))]
    heads, states = drafter_states_from_sequences(tiny_target, drafter, sequences)
    assert heads.shape == states.shape == (8 + 4, 32)  # len − 1 rows per sequence; the 1-token one adds none
    ids = sequences[0].view(1, -1)
    with torch.no_grad():
        logits = tiny_target(input_ids=ids).logits[0]
        hidden = tiny_target(input_ids=ids, output_hidden_states=True).hidden_states
        features = torch.cat([hidden[i] for i in drafter.config.target_layer_ids], dim=-1)
        drafted = drafter(input_ids=ids[:, 1:], target_features=features[:, :-1]).logits[0]
    # the target's next-token logits at t+1 come from the head input of row t ...
    assert torch.allclose(heads[:8] @ tiny_target.lm_head.weight.T, logits[1:], atol=1e-5)
    # ... and the drafter's head applied to its state at t gives its draft for the same token
    assert torch.allclose(drafter.lm_head(states[:8]), drafted, atol=1e-5)
    with pytest.raises(ValueError, match="shorter than 2"):
        drafter_states_from_sequences(tiny_target, drafter, [torch.randint(128, (1,))])
    # the proxies start from the drafter's own head, as a dense V×d matrix
    weight = drafter_head_weight(drafter)
    assert weight.shape == (128, 32)
    assert torch.allclose(states[:8] @ weight.T, drafted, atol=1e-4)
    assert drafter_head_weight(make_tiny_drafter(tiny_target, head_type="target")) is None
    with pytest.raises(ValueError, match="proxy_weight"):
        choose_rank([4], {4: 0.1}, 0.3, weight=weight, hidden_states=heads, proxy_weight=weight[:, :16])


def test_activation_aware_factors_beat_the_plain_svd_under_the_data():
    weight, states = knee_head(d=16, vocab=64, knee=16)
    # anisotropic inputs: the weighted error must beat the plain SVD's
    states = states[:, :16] * torch.linspace(3.0, 0.05, 16)
    down, up = activation_aware_factors(weight, second_moment(states), 15)
    assert down.shape == (15, 16) and up.shape == (64, 15)
    from slimspec_hf import low_rank_factors

    plain_down, plain_up = low_rank_factors(weight, 4)
    aware_down, aware_up = activation_aware_factors(weight, second_moment(states), 4)
    err = lambda d_, u_: float(((states @ weight.T) - (states @ d_.T) @ u_.T).pow(2).mean())  # noqa: E731
    assert err(aware_down, aware_up) < err(plain_down, plain_up)


def test_rho_tau_from_agreements_chain_model():
    # same agreement as the full-head proxy: ρτ = 1 whatever the shared deficit
    assert rho_tau_from_agreements(0.6, 0.6, 6) == pytest.approx(1.0)
    # default α_full = a_full: ρτ = τ(a) / τ(a_full)
    assert rho_tau_from_agreements(0.4, 0.8, 6) == pytest.approx(
        tau_from_acceptance_rate(0.4, 6) / tau_from_acceptance_rate(0.8, 6)
    )
    # a measured α_full = 0.9 with a/a_full = 0.5: α_r = 0.45
    expected = sum(0.45**i for i in range(7)) / sum(0.9**i for i in range(7))
    assert rho_tau_from_agreements(0.3, 0.6, 6, acceptance_rate=0.9) == pytest.approx(expected)
    # a rank-r proxy above the full one (noise) caps at α = 1
    assert rho_tau_from_agreements(0.7, 0.6, 6, acceptance_rate=0.9) == pytest.approx(
        7 / tau_from_acceptance_rate(0.9, 6)
    )
    with pytest.raises(ValueError, match="full_agreement"):
        rho_tau_from_agreements(0.3, 0.0, 6)


def test_assumed_rho_tau_matches_the_paper_anchors():
    assert assumed_rho_tau(4096 // 16, 4096) == pytest.approx(0.98)
    assert assumed_rho_tau(4096 // 8, 4096) == pytest.approx(0.99)
    assert assumed_rho_tau(4096 // 2, 4096) == 1.0
    assert assumed_rho_tau(4096 // 32, 4096) == pytest.approx(0.97)


def test_default_ranks_and_errors():
    assert default_ranks(576) == [18, 36, 48, 72, 96, 144, 288]
    with pytest.raises(ValueError, match="rank 40 must satisfy"):
        choose_rank([40], {40: 0.5}, 1.0, hidden_size=32)
    with pytest.raises(ValueError, match="`mode`"):
        measure_nu(32, 256, [4], mode="flops")


def test_cli_shape_mode_prints_and_writes_json(tmp_path, capsys):
    out = tmp_path / "ranks.json"
    assert main(["--shape", "64", "512", "--kappa", "0.25", "--ranks", "4", "8", "16", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "ASSUMED" in printed and "chosen rank" in printed
    report = json.loads(out.read_text())
    assert report[0]["shape"] == [64, 512] and report[0]["best_rank"] in (4, 8, 16)
    assert [r["rank"] for r in report[0]["rows"]] == [4, 8, 16]
    assert main(["--shape", "64", "512"]) == 2  # κ cannot be measured without a target


def test_load_head_weight(tmp_path):
    from safetensors.torch import save_file

    save_file({"lm_head.weight": torch.ones(8, 4), "fc.weight": torch.ones(4, 12)}, tmp_path / "model.safetensors")
    assert load_head_weight(tmp_path).shape == (8, 4)
    save_file({"lm_head.up.weight": torch.ones(8, 2)}, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match="full head"):
        load_head_weight(tmp_path)


def test_choose_rank_takes_the_draft_length():
    from slimspec_hf.commands.choose_rank import build_parser

    assert build_parser().parse_args(["-k", "4"]).num_assistant_tokens == 4
    assert build_parser().parse_args(["--num-assistant-tokens", "3"]).num_assistant_tokens == 3
    assert build_parser().parse_args([]).num_assistant_tokens == 6
