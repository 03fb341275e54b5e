"""Automatic rank selection: a synthetic head with a known spectral knee, the ρτ model, the CLI paths."""

import json

import pytest
import torch

from slimspec_hf.cost_model import speedup
from slimspec_hf.rank_selection import (
    activation_aware_factors,
    assumed_rho_tau,
    choose_rank,
    default_ranks,
    load_head_weight,
    main,
    measure_nu,
    rho_tau_from_agreement,
)


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
    best, rows = choose_rank(ranks, nu_by_rank, kappa=1.0, weight=weight, hidden_states=states, steps=30)
    assert best.rank == 8
    by_rank = {row.rank: row for row in rows}
    assert by_rank[8].energy > 0.999 > by_rank[4].energy
    assert by_rank[4].agreement < 0.8 < by_rank[8].agreement  # below the knee the top-1 breaks
    for row in rows:
        assert row.predicted_speedup == pytest.approx(speedup(row.rho_tau, row.nu, 1.0))


def test_activation_aware_factors_beat_the_plain_svd_under_the_data():
    weight, states = knee_head(d=16, vocab=64, knee=16)
    # anisotropic inputs: the weighted error must beat the plain SVD's
    states = states[:, :16] * torch.linspace(3.0, 0.05, 16)
    down, up = activation_aware_factors(weight, states, 15)
    assert down.shape == (15, 16) and up.shape == (64, 15)
    from slimspec_hf import low_rank_factors

    plain_down, plain_up = low_rank_factors(weight, 4)
    aware_down, aware_up = activation_aware_factors(weight, states, 4)
    err = lambda d_, u_: float(((states @ weight.T) - (states @ d_.T) @ u_.T).pow(2).mean())  # noqa: E731
    assert err(aware_down, aware_up) < err(plain_down, plain_up)


def test_rho_tau_from_agreement_chain_model():
    assert rho_tau_from_agreement(1.0, 0.8, 6) == pytest.approx(1.0)
    # α = 0.8 → τ = Σ 0.8^i, with a = 0.5 the chain breaks twice as often
    expected = sum(0.4**i for i in range(7)) / sum(0.8**i for i in range(7))
    assert rho_tau_from_agreement(0.5, 0.8, 6) == pytest.approx(expected)


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
