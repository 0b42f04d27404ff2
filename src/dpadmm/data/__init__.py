"""Loaders, bundled datasets, partitioning and synthetic generators."""

from .libsvm import load_libsvm
from .adult import load_adult
from .datasets import load_a9a, make_highdim_classification
from .functional import (
    FunctionalData, load_dataset, load_fertility, load_functional_csv, load_tecator, load_temperature, simulate_zhou,
)
from .parties import normalize_rows, partition_columns, read_party_files, write_party_files, row_norms

__all__ = [
    "load_libsvm", "load_a9a", "load_adult", "make_highdim_classification",
    "FunctionalData", "load_dataset", "load_fertility", "load_functional_csv", "load_tecator", "load_temperature",
    "simulate_zhou",
    "partition_columns", "normalize_rows", "row_norms", "read_party_files", "write_party_files",
]
