"""The acceptance–cost model against the paper's published Llama-3.1-8B points, break-even, and the κ fit."""

import math

import pytest

from slimspec_hf.evaluation.cost_model import (
    break_even_rho_tau,
    fit_kappa,
    is_profitable,
    iso_speedup_rho_tau,
    plot_acceptance_cost,
    speedup,
)


# Llama-3.1-8B, batch 1, κ ≈ 0.25: (name, ρτ, ν, measured speed-up over the full head, the model's value)
PAPER_POINTS = [
    ("SlimSpec d/8", 0.99, 0.21, 1.19, 1.18),
    ("SlimSpec d/16", 0.98, 0.14, 1.18, 1.18),
    ("SpecVocab", 1.01, 0.46, 1.16, 1.13),
    ("VocabTrim 64K", 1.00, 0.58, 1.09, 1.09),
]


@pytest.mark.parametrize("name, rho, nu, measured, published_model", PAPER_POINTS)
def test_speedup_reproduces_the_papers_points(name, rho, nu, measured, published_model):
    predicted = speedup(rho, nu, 0.25)
    assert predicted == pytest.approx(published_model, abs=0.005), name
    assert abs(predicted - measured) <= 0.03, name


def test_formula_and_limits():
    assert speedup(0.9, 0.5, 1.0) == pytest.approx(0.9 * 2.0 / 1.5)
    assert speedup(1.0, 1.0, 3.0) == pytest.approx(1.0)  # the full head against itself
    assert speedup(0.97, 0.3, 0.0) == pytest.approx(0.97)  # a free head: only acceptance matters
    # κ → ∞: the head is everything, the speed-up tends to ρτ/ν
    assert speedup(0.99, 0.2, 1e9) == pytest.approx(0.99 / 0.2, rel=1e-6)


def test_break_even():
    nu, kappa = 0.21, 0.25
    rho_star = break_even_rho_tau(nu, kappa)
    assert rho_star == pytest.approx((1 + nu * kappa) / (1 + kappa))
    assert speedup(rho_star, nu, kappa) == pytest.approx(1.0)
    assert is_profitable(rho_star + 1e-6, nu, kappa) and not is_profitable(rho_star - 1e-6, nu, kappa)
    assert not is_profitable(0.99, 1.0, kappa)  # same cost, less acceptance never pays
    assert speedup(iso_speedup_rho_tau(1.2, nu, kappa), nu, kappa) == pytest.approx(1.2)


def test_bad_inputs_name_the_parameter():
    with pytest.raises(ValueError, match="`kappa`.*-0.1"):
        speedup(1.0, 0.2, -0.1)
    with pytest.raises(ValueError, match="`nu`"):
        break_even_rho_tau(float("nan"), 0.25)
    with pytest.raises(ValueError, match="equal length"):
        fit_kappa([1.0], [0.2, 0.3], [1.1])


def test_fit_kappa_recovers_a_known_kappa():
    rhos, nus = [0.99, 0.98, 1.01, 1.0, 0.95], [0.21, 0.14, 0.46, 0.58, 0.1]
    measured = [speedup(r, n, 0.7) for r, n in zip(rhos, nus)]
    fit = fit_kappa(rhos, nus, measured)
    assert fit["kappa"] == pytest.approx(0.7, abs=1e-6)
    assert fit["rmse"] < 1e-9


def test_fit_kappa_on_the_papers_measurements():
    _, rhos, nus, measured, _ = zip(*PAPER_POINTS)
    fit = fit_kappa(rhos, nus, measured)
    assert 0.2 < fit["kappa"] < 0.32  # the paper reports κ ≈ 0.25
    assert fit["rmse"] < 0.02
    # least squares: no other κ does better
    sse = lambda k: sum((m - speedup(r, n, k)) ** 2 for r, n, m in zip(rhos, nus, measured))  # noqa: E731
    assert sse(fit["kappa"]) <= min(sse(fit["kappa"] + d) for d in (-0.01, 0.01))
    assert math.isclose(fit["predicted"][0], speedup(0.99, 0.21, fit["kappa"]))


def test_acceptance_cost_plot(tmp_path):
    path = tmp_path / "fig" / "acceptance_cost.png"
    points = [{"name": n, "rho_tau": r, "nu": v, "speedup": m} for n, r, v, m, _ in PAPER_POINTS]
    plot_acceptance_cost(points, 0.25, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in path.parent.iterdir()] == ["acceptance_cost.png"]  # no temporary file left
