"""Gedik's problem model: resource functions, tolerances, the frequency threshold δ, utilities and metrics.

Paper: B. Gedik, "Partitioning functions for stateful data parallelism in stream processing"
(``shared/papers/gedik-partitioning-functions.txt``).

* Resources k ∈ {state s, computation c, communication n}; resource functions β_k ∈ {constant 1, linear x,
  quadratic x²} of an item's relative frequency x (§3.1).
* Load of channel i for resource k: ``L_k(i) = Σ_{d: p(d)=i} β_k(f(d))`` (Eq. 1, Eq. 5 with β_n(x)=x).
  Note: Eq. 3 writes ``f(d)·β_c(f(d))`` for computation, but the δ derivation (Eq. 16–17: β_k(δ) compared with
  L̄_k, L̄_k = |D| for constant β), the example of §3.1 (β_c(x) = x² already *is* f·β_s(f)) and §4.4 ("constant
  resources are balanced for free") all use ``Σ β_k(f)``; we follow those for every resource.
* Balance r_k = max_i L_k(i) / min_i L_k(i) (Eq. 2, 4, 6); relative imbalance b_k = r_k/α_k, b = (Π_k b_k)^(1/3)
  (Eq. 11); migration M = Σ β_s(f(d))·1(p_t(d) ≠ p_{t+1}(d)) (Eq. 9), ideal L̄_s = Σ_d β_s(f(d))/N (Eq. 10),
  relative migration m = M / L̄_s (Eq. 12).
* θ_k = (α_k − 1)·(1 + α_k/(N − 1))^(−1) (Eq. 15); δ_k from Eq. 17 (1; σθ_k/N; sqrt(σθ_k/(|D|·N))), δ = min_k δ_k,
  with the post-processing step of §4.1.3 for quadratic functions (δ'_k from the predicted L̄_k).
* Balance penalty ρ_k = (max − min)/(θ_k·L̄_k) over the explicitly mapped items (Eq. 19), ρ = geometric mean over the
  resources whose function is not constant (Eq. 20 with §4.4); utilities U^A, U^APM, U^APLM, U^ATM, U^ATLM (§4.3).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rebalancer_client.contract.partitioning import RESOURCE_FUNCTIONS as FUNCTIONS
from rebalancer_client.contract.partitioning import RESOURCES, UTILITIES

__all__ = [
    "RESOURCES", "FUNCTIONS", "UTILITIES", "Config", "beta", "theta", "delta_for", "select_tracked",
    "utility", "balance_metrics", "rho_of_loads",
]


@dataclass
class Config:
    """Parameters of a construction (defaults from Table 1 of the paper)."""

    resources: tuple[str, str, str] = ("linear", "constant", "linear")  # LCL (β_s, β_c, β_n)
    alpha: tuple[float, float, float] = (1.2, 1.2, 1.2)                 # α_s, α_c, α_n
    sigma: float = 0.1
    utility: str = "APM"
    move_limit: int = 5            # readj: c, moves per item (§4.2.4)
    readj_require_gain: bool = False  # see solvers.gedik.construct.readj
    tie_break: str = "load"        # scan/redist among equal utilities: "load" (least loaded) or "index" (listing)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def active(self) -> list[int]:
        """Indices of resources that enter ρ: the non-constant ones (§4.4)."""
        return [k for k, fn in enumerate(self.resources) if fn != "constant"]


def beta(fn: str, f: np.ndarray) -> np.ndarray:
    """β(f) for a resource function name (§3.1)."""
    f = np.asarray(f, dtype=np.float64)
    if fn == "constant":
        return np.ones_like(f)
    if fn == "linear":
        return f.copy()
    if fn == "quadratic":
        return np.asarray(f * f, dtype=np.float64)
    raise ValueError(f"unknown resource function {fn!r}")


def theta(alpha: float, n: int) -> float:
    """θ = (α − 1)·(1 + α/(N − 1))^(−1) (Eq. 15); 0 for N = 1 (one channel is always balanced)."""
    if n <= 1:
        return 0.0
    return (alpha - 1.0) / (1.0 + alpha / (n - 1.0))


def delta_for(fn: str, sigma: float, th: float, n: int, domain_size: float) -> float:
    """δ_k of Eq. 17 for one resource function."""
    if fn == "constant":
        return 1.0
    if fn == "linear":
        return sigma * th / n
    if fn == "quadratic":
        return math.sqrt(sigma * th / (domain_size * n))
    raise ValueError(f"unknown resource function {fn!r}")


def select_tracked(freqs: np.ndarray, n: int, cfg: Config, domain_size: float
                   ) -> tuple[float, dict[str, float], np.ndarray]:
    """The frequency threshold δ and the items to track, D_p = {d : f(d) ≥ δ} (§4.1, §4.1.3).

    δ_k from Eq. 17 per resource and δ = min_k δ_k. For a quadratic resource the post-processing step of §4.1.3
    replaces δ_k by δ'_k = sqrt(σ·θ_k·L̄'_k) where L̄'_k = [Σ_{d∈I} f(d)² + (|D| − |I|)·((1 − Σ_{d∈I} f(d))/(|D| −
    |I|))²]/N is predicted from the items I = {f ≥ δ} collected with the Eq. 17 value. With N = 1 nothing needs
    tracking (δ = 1). Returns (δ, {resource: δ_k}, boolean mask over ``freqs``).
    """
    f = np.asarray(freqs, dtype=np.float64)
    if n <= 1:
        d = {RESOURCES[k]: 1.0 for k in range(3)}
        return 1.0, d, f >= 2.0  # nothing tracked
    ths = [theta(cfg.alpha[k], n) for k in range(3)]
    dk = {RESOURCES[k]: delta_for(cfg.resources[k], cfg.sigma, ths[k], n, domain_size) for k in range(3)}
    delta = min(dk.values())
    if "quadratic" in cfg.resources:
        mask = f >= delta
        fi = f[mask]
        rest_n = max(domain_size - len(fi), 1.0)
        rest_f = max(1.0 - float(fi.sum()), 0.0)
        lbar = (float(np.dot(fi, fi)) + rest_n * (rest_f / rest_n) ** 2) / n
        for k in range(3):
            if cfg.resources[k] == "quadratic":
                dk[RESOURCES[k]] = math.sqrt(cfg.sigma * ths[k] * lbar)
        delta = min(dk.values())
    return delta, dk, f >= delta


def utility(name: str, rho: Any, gamma: Any) -> Any:
    """U(ρ, γ) of §4.3 (vectorised): A = ρ; APM = ρ+γ; APLM = ρ+log(1+γ); ATM = ρ(1+γ); ATLM = ρ(1+log(1+γ))."""
    if name == "A":
        return rho + 0.0 * gamma
    if name == "APM":
        return rho + gamma
    if name == "APLM":
        return rho + np.log1p(gamma)
    if name == "ATM":
        return rho * (1.0 + gamma)
    if name == "ATLM":
        return rho * (1.0 + np.log1p(gamma))
    raise ValueError(f"unknown utility {name!r}")


def rho_of_loads(loads: np.ndarray, thetas: np.ndarray) -> float:
    """ρ (Eq. 19–20) of a (K, N) load matrix over the active resources (K may be 0 → 0)."""
    if loads.shape[0] == 0:
        return 0.0
    mean = loads.mean(axis=1)
    spread = loads.max(axis=1) - loads.min(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rk = np.where(mean > 0, spread / (thetas * mean), 0.0)
    return float(np.prod(rk) ** (1.0 / len(rk)))


def balance_metrics(loads: np.ndarray, alpha: Sequence[float]) -> dict[str, Any]:
    """r_k, b_k (Eq. 2/4/6, 11) and b for a (3, N) matrix of channel loads (rows: state, computation,
    communication). A channel with zero load makes r_k infinite: reported as ``None`` (JSON has no ∞)."""
    out_r, out_b = {}, {}
    bs = []
    for k, name in enumerate(RESOURCES):
        mx, mn = float(loads[k].max()), float(loads[k].min())
        if mx <= 0:
            r = 1.0
        elif mn <= 0:
            r = math.inf
        else:
            r = mx / mn
        bk = r / alpha[k]
        out_r[name] = None if math.isinf(r) else r
        out_b[name] = None if math.isinf(bk) else bk
        bs.append(bk)
    b = math.inf if any(math.isinf(x) for x in bs) else float(np.prod(bs) ** (1.0 / 3.0))
    return {"b": None if math.isinf(b) else b, "b_k": out_b, "r_k": out_r}
