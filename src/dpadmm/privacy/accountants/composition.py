"""Closed-form composition theorems, as the papers use them."""

from __future__ import annotations

import math


def basic_composition(epsilon: float, delta: float, T: int) -> tuple[float, float]:
    """T-fold basic composition: (Tε, Tδ)."""
    return T * epsilon, T * delta


def advanced_composition(epsilon: float, delta: float, T: int, delta_prime: float) -> tuple[float, float]:
    """Advanced composition (Dwork, Rothblum & Vadhan 2010; Dwork & Roth 2014, Thm 3.20):
    T mechanisms, each (ε, δ)-DP, are (ε', Tδ + δ')-DP with
    ``ε' = sqrt(2T ln(1/δ')) ε + T ε (e^ε − 1)``  — [Hu, eq. 17, Cor. 1], [Zhou, Lemma 1].
    Returns ``(inf, ·)`` on overflow.
    """
    if T <= 0:
        return 0.0, 0.0
    try:
        eps = math.sqrt(2.0 * T * math.log(1.0 / delta_prime)) * epsilon + T * epsilon * math.expm1(epsilon)
    except OverflowError:
        eps = math.inf
    return eps, T * delta + delta_prime


def hu_corollary1(epsilon_iter: float, delta_iter: float, T: int, delta_prime: float) -> tuple[float, float]:
    """[Hu, Cor. 1]: the whole run of T iterations is (ε', Tδ + δ')-DP (advanced composition)."""
    return advanced_composition(epsilon_iter, delta_iter, T, delta_prime)
