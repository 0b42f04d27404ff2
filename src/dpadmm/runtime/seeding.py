"""The seeded simulation's per-round generator, ``default_rng(SeedSequence(seed, spawn_key=(index, round)))``,
without rebuilding the SeedSequence every round.

A seeded run builds one generator per party per round (:func:`dpadmm.backends.base.party_rng`). numpy's
``SeedSequence`` spends ~20 µs coercing and hashing its entropy and ~15 µs more in ``default_rng`` drawing the
PCG64 seed from it: on a 5-node gossip run of 230 rounds that was a sixth of the fit. The hash itself is a few
32-bit multiplications, and everything before the round's word is the same in every round of a party: here the
pool after ``seed`` and ``index`` is mixed once (cached), the round's word is mixed into a copy of it, and the
PCG64 is seeded from the words numpy's ``SeedSequence.generate_state(4, uint64)`` would give — the same
algorithm (numpy's ``bit_generator.pyx``: ``mix_entropy``, ``hashmix``, ``mix``, ``generate_state``, its
constants), so the generator is the same stream, draw for draw; ``tests/unit/test_seeding.py`` checks that
against numpy's own ``SeedSequence`` on many seeds, indices and rounds. Anything the fast path does not cover
(a negative or non-integer seed, a pool size other than 4) goes through numpy's ``SeedSequence`` as before.
"""

from __future__ import annotations

import functools

import numpy as np
from numpy.random.bit_generator import ISeedSequence

# numpy/random/bit_generator.pyx (SeedSequence, pool size 4)
_POOL = 4
_INIT_A = 0x43B0D7E5
_MULT_A = 0x931E8875
_INIT_B = 0x8B51F9DD
_MULT_B = 0x58F38DED
_MIX_L = 0xCA01F9DD
_MIX_R = 0x4973F715
_SHIFT = 16
_M32 = 0xFFFFFFFF


def _words(value: int) -> list[int]:
    """``_coerce_to_uint32_array`` of a non-negative int: its little-endian 32-bit words (0 → [0])."""
    out = []
    while True:
        out.append(value & _M32)
        value >>= 32
        if not value:
            return out


def _mix(x: int, y: int) -> int:
    r = (_MIX_L * x - _MIX_R * y) & _M32
    return r ^ (r >> _SHIFT)


class _Hash:
    """``mix_entropy``'s running hash constant (one per SeedSequence: it advances with every ``hashmix``)."""

    __slots__ = ("c",)

    def __init__(self, c: int = _INIT_A):
        self.c = c

    def __call__(self, value: int) -> int:
        value ^= self.c
        self.c = (self.c * _MULT_A) & _M32
        value = (value * self.c) & _M32
        return value ^ (value >> _SHIFT)


@functools.lru_cache(maxsize=1024)
def _prefix(seed: int, index: int) -> tuple[tuple[int, ...], int]:
    """The pool (and the hash constant) after mixing the seed's words, padded to the pool size, and the index's."""
    words = _words(seed)
    words += [0] * (_POOL - len(words))  # a spawn key follows: the run entropy is padded to the pool size
    h = _Hash()
    pool = [h(words[i]) for i in range(_POOL)]
    for src in range(_POOL):
        for dst in range(_POOL):
            if src != dst:
                pool[dst] = _mix(pool[dst], h(pool[src]))
    for w in words[_POOL:] + _words(index):
        for dst in range(_POOL):
            pool[dst] = _mix(pool[dst], h(w))
    return tuple(pool), h.c


class _State(ISeedSequence):
    """The four uint64 words ``SeedSequence.generate_state(4, np.uint64)`` gives, for PCG64's constructor."""

    __slots__ = ("_state",)

    def __init__(self, state: np.ndarray):
        self._state = state

    def generate_state(self, n_words, dtype=np.uint32):
        if n_words != 4 or (dtype is not np.uint64 and np.dtype(dtype) != np.dtype(np.uint64)):  # PCG64 asks for these
            raise ValueError("a precomputed PCG64 seed state has 4 uint64 words")
        return self._state.copy()


_BLOCK = 256  # rounds whose seeds are hashed together (numpy uint32 arithmetic wraps modulo 2**32, as the C does)


@functools.lru_cache(maxsize=256)
def _block(seed: int, index: int, block: int) -> np.ndarray:
    """(``_BLOCK``, 4) uint64: ``generate_state(4, uint64)`` of the SeedSequences of rounds ``block·_BLOCK + k``
    (each < 2**32: one word), hashed together, one vector operation per step of numpy's loops."""
    pool0, c = _prefix(seed, index)
    u32 = np.uint32
    t = np.arange(block * _BLOCK, (block + 1) * _BLOCK, dtype=np.uint64).astype(u32)
    pool = [np.full(_BLOCK, p, dtype=u32) for p in pool0]
    with np.errstate(over="ignore"):
        for dst in range(_POOL):  # the round's word, mixed into each pool word (hashmix with the running constant)
            hv = (t ^ u32(c)) * u32((c * _MULT_A) & _M32)
            c = (c * _MULT_A) & _M32
            hv ^= hv >> u32(_SHIFT)
            r = u32(_MIX_L) * pool[dst] - u32(_MIX_R) * hv
            pool[dst] = r ^ (r >> u32(_SHIFT))
        hc = _INIT_B
        out = []
        for i in range(8):  # generate_state: 8 uint32 words
            hc_next = (hc * _MULT_B) & _M32
            v = (pool[i % _POOL] ^ u32(hc)) * u32(hc_next)
            hc = hc_next
            out.append((v ^ (v >> u32(_SHIFT))).astype(np.uint64))
    return np.stack([out[2 * k] | (out[2 * k + 1] << np.uint64(32)) for k in range(4)], axis=1)


def _state_words(seed: int, index: int, round_: int) -> np.ndarray:
    """``SeedSequence(seed, spawn_key=(index, round_)).generate_state(4, np.uint64)``."""
    if round_ < 2**32:
        return _block(seed, index, round_ // _BLOCK)[round_ % _BLOCK]
    pool0, c = _prefix(seed, index)
    pool = list(pool0)
    h = _Hash(c)
    for w in _words(round_):
        for dst in range(_POOL):
            pool[dst] = _mix(pool[dst], h(w))
    hc = _INIT_B
    out = []
    for i in range(8):  # generate_state(4, uint64): 8 uint32 words, little-endian pairs
        v = pool[i % _POOL] ^ hc
        hc = (hc * _MULT_B) & _M32
        v = (v * hc) & _M32
        out.append(v ^ (v >> _SHIFT))
    return np.array([out[2 * k] | (out[2 * k + 1] << 32) for k in range(4)], dtype=np.uint64)


def seeded_generator(seed, index: int, round_: int) -> np.random.Generator:
    """``default_rng(SeedSequence(seed, spawn_key=(index, round_)))``, the same stream (module docstring)."""
    if type(seed) is int and type(index) is int and type(round_) is int and seed >= 0 and index >= 0 \
            and round_ >= 0:  # the usual call, without the conversions below
        return np.random.Generator(np.random.PCG64(_State(_state_words(seed, index, round_))))
    if (type(seed) is int or isinstance(seed, np.integer)) and int(seed) >= 0 and int(index) >= 0 \
            and int(round_) >= 0:
        return np.random.Generator(np.random.PCG64(_State(_state_words(int(seed), int(index), int(round_)))))
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(index, round_)))


__all__ = ["seeded_generator"]
