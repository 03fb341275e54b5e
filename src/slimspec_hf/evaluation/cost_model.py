# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""The acceptance–cost model: when does a cheaper drafter head pay for the acceptance it loses?

A speculative-decoding round costs the target's verification plus k drafter steps, each a backbone pass and a
head pass. Let T_non_head be everything in a round but the head (verification + k backbone passes) and
k·T_head_full the full head's share, so that

    κ = k·T_head_full / T_non_head        (the full head's cost relative to the rest of the round)
    ν = T_head / T_head_full              (a head's cost relative to the full head)
    ρτ = τ_head / τ_full                  (its acceptance length relative to the full head's)

Tokens per second are τ / T_round, hence the speed-up of a head over the full head

    S = ρτ · (1 + κ) / (1 + ν·κ),

which exceeds 1 (break-even) exactly when ρτ > (1 + ν·κ) / (1 + κ).
"""

import math
from collections.abc import Sequence


def _check(name: str, value: float, low: float = 0.0, allow_equal: bool = True) -> float:
    value = float(value)
    ok = value >= low if allow_equal else value > low
    if not ok or math.isnan(value):
        relation = ">=" if allow_equal else ">"
        raise ValueError(f"`{name}` must be a number {relation} {low}, got {value}.")
    return value


def nu_macs(rank: int, hidden_size: int, vocab_size: int) -> float:
    """ν of a rank-r head counted in multiply–accumulates, r·(d + V) / (d·V): the memory-bound limit. The one
    head-cost formula of the package (the others below derive from it)."""
    if not 0 < rank <= min(hidden_size, vocab_size):
        raise ValueError(
            f"`rank` ({rank}) must lie in (0, min(hidden_size, vocab_size) = {min(hidden_size, vocab_size)}]."
        )
    return rank * (hidden_size + vocab_size) / (hidden_size * vocab_size)


def mac_limit_low_rank(hidden_size: int, vocab_size: int, rank: int) -> float:
    """(V·d)/(r·d + V·r) = 1/ν_MAC: the low-rank head's best possible speed-up over the full head."""
    return 1.0 / nu_macs(rank, hidden_size, vocab_size)


def mac_limit_trimmed(vocab_size: int, draft_vocab_size: int) -> float:
    """V/K: the trimmed head's best possible speed-up over the full head (the scatter is not counted)."""
    return vocab_size / draft_vocab_size


def speedup(rho_tau: float, nu: float, kappa: float) -> float:
    """Predicted speed-up of a head over the full head: ρτ·(1+κ)/(1+ν·κ)."""
    rho_tau = _check("rho_tau", rho_tau)
    nu = _check("nu", nu)
    kappa = _check("kappa", kappa)
    return rho_tau * (1.0 + kappa) / (1.0 + nu * kappa)


def break_even_rho_tau(nu: float, kappa: float) -> float:
    """The relative acceptance length a head needs to break even: (1+ν·κ)/(1+κ)."""
    nu = _check("nu", nu)
    kappa = _check("kappa", kappa)
    return (1.0 + nu * kappa) / (1.0 + kappa)


def is_profitable(rho_tau: float, nu: float, kappa: float) -> bool:
    """True when the head is predicted to be faster than the full head (ρτ > (1+νκ)/(1+κ))."""
    return _check("rho_tau", rho_tau) > break_even_rho_tau(nu, kappa)


def iso_speedup_rho_tau(target_speedup: float, nu: float, kappa: float) -> float:
    """ρτ at which a head of relative cost ν reaches `target_speedup` (a point of an iso-speed-up line)."""
    return _check("target_speedup", target_speedup, allow_equal=False) * break_even_rho_tau(nu, kappa)


def fit_kappa(
    rho_tau: Sequence[float], nu: Sequence[float], measured_speedup: Sequence[float], iterations: int = 50
) -> dict:
    """Least-squares κ from measured (ρτ, ν, speed-up) points, as a user with their own measurements would.

    Minimises Σ (S_i − ρτ_i·(1+κ)/(1+ν_i·κ))² over κ ≥ 0: starts from the linearised solution of
    S(1+νκ) = ρτ(1+κ) and refines it with Gauss–Newton steps. Returns `{"kappa", "rmse", "residuals",
    "predicted"}`.
    """
    rho_tau, nu, measured_speedup = list(map(float, rho_tau)), list(map(float, nu)), list(map(float, measured_speedup))
    if not (len(rho_tau) == len(nu) == len(measured_speedup)) or not rho_tau:
        raise ValueError(
            f"`rho_tau`, `nu` and `measured_speedup` must be non-empty and of equal length, got "
            f"{len(rho_tau)}, {len(nu)} and {len(measured_speedup)}."
        )
    for name, values in (("rho_tau", rho_tau), ("nu", nu), ("measured_speedup", measured_speedup)):
        for v in values:
            _check(name, v)
    # Linearised: κ·(S·ν − ρτ) = ρτ − S, one unknown, closed form.
    a = [s * n - r for r, n, s in zip(rho_tau, nu, measured_speedup)]
    b = [r - s for r, s in zip(rho_tau, measured_speedup)]
    denom = sum(x * x for x in a)
    kappa = max(0.0, sum(x * y for x, y in zip(a, b)) / denom) if denom > 0 else 0.0
    for _ in range(iterations):
        # residual e_i = S_i − f_i(κ); df/dκ = ρτ (1 − ν) / (1 + νκ)²
        residuals = [s - speedup(r, n, kappa) for r, n, s in zip(rho_tau, nu, measured_speedup)]
        jac = [r * (1.0 - n) / (1.0 + n * kappa) ** 2 for r, n in zip(rho_tau, nu)]
        jtj = sum(j * j for j in jac)
        if jtj == 0:
            break
        step = sum(j * e for j, e in zip(jac, residuals)) / jtj
        new_kappa = max(0.0, kappa + step)
        if abs(new_kappa - kappa) < 1e-12:
            kappa = new_kappa
            break
        kappa = new_kappa
    predicted = [speedup(r, n, kappa) for r, n in zip(rho_tau, nu)]
    residuals = [s - p for s, p in zip(measured_speedup, predicted)]
    rmse = math.sqrt(sum(e * e for e in residuals) / len(residuals))
    return {"kappa": kappa, "rmse": rmse, "residuals": residuals, "predicted": predicted}


def plot_acceptance_cost(
    points: Sequence[dict],
    kappa: float,
    path,
    speedups: Sequence[float] = (0.9, 1.0, 1.1, 1.2, 1.3, 1.5, 2.0),
    title: str | None = None,
) -> None:
    """The acceptance–cost figure: ν (x) against ρτ (y), iso-speed-up lines for `kappa`, each head a point.

    `points` are dicts with `"name"`, `"nu"`, `"rho_tau"` and optionally `"speedup"` (measured, shown in the
    label). The line S = 1 is break-even; heads above a line are faster than its speed-up. Written to `path`
    (PNG) through a temporary file.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kappa = _check("kappa", kappa)
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    xs = [i / 100 for i in range(101)]
    rhos = [float(p["rho_tau"]) for p in points]
    y_low = min([0.8, *[r - 0.05 for r in rhos]])
    y_high = max([1.1, *[r + 0.05 for r in rhos]])
    for s in speedups:
        ys = [iso_speedup_rho_tau(s, x, kappa) for x in xs]
        style = dict(color="black", lw=1.4) if s == 1.0 else dict(color="grey", lw=0.8, ls="--")
        ax.plot(xs, ys, **style)
        # label where the line leaves the visible band
        inside = [(x, y) for x, y in zip(xs, ys) if y_low <= y <= y_high]
        if inside:
            x_lab, y_lab = inside[-1]
            ax.annotate(f"S={s:g}", (x_lab, y_lab), fontsize=7, color=style["color"], ha="right", va="bottom")
    for p in points:
        label = p["name"]
        if p.get("speedup") is not None:
            label += f" (S={float(p['speedup']):.2f})"
        ax.scatter([float(p["nu"])], [float(p["rho_tau"])], zorder=3)
        ax.annotate(
            label, (float(p["nu"]), float(p["rho_tau"])), fontsize=8, xytext=(4, 4), textcoords="offset points"
        )
    ax.set_xlim(0, 1)
    ax.set_ylim(y_low, y_high)
    ax.set_xlabel("ν = T_head / T_head_full (relative head cost)")
    ax.set_ylabel("ρτ = τ_head / τ_full (relative acceptance length)")
    ax.set_title(title or f"Acceptance–cost trade-off (κ = {kappa:.3g}); black: break-even")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path)


def save_figure(fig, path) -> None:
    """Writes a matplotlib figure to `path` (PNG) through a temporary file, then closes it."""
    import matplotlib.pyplot as plt

    from ..utils import atomic_path

    try:
        with atomic_path(path, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=120)
    finally:
        plt.close(fig)


__all__ = [
    "nu_macs",
    "mac_limit_low_rank",
    "mac_limit_trimmed",
    "speedup",
    "break_even_rho_tau",
    "is_profitable",
    "iso_speedup_rho_tau",
    "fit_kappa",
    "plot_acceptance_cost",
    "save_figure",
]
