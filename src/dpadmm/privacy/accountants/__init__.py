"""Accountants: tight composition on Google's dp-accounting (PLD, RDP) and the papers' own bounds.

A failing accountant returns ε = ∞, never an optimistic guess.
"""

from .composition import advanced_composition, basic_composition, hu_corollary1
from .gaussian import (
    ACCOUNTANTS,
    calibrate_noise_multiplier,
    gaussian_epsilon,
)

__all__ = [
    "ACCOUNTANTS", "gaussian_epsilon", "calibrate_noise_multiplier",
    "advanced_composition", "basic_composition", "hu_corollary1",
]
