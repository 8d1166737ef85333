"""Episode seed ranges. ``env.reset(seed=s)`` fixes a BabyAI episode, so disjoint ranges keep every evaluated
episode out of the demonstrations and the test episodes out of model selection::

    [0, TEST_SEED_START)                  demonstrations, every split of every dataset (msvae_hf.data.demos)
    [TEST_SEED_START, VALID_SEED_START)   test rollouts (BabyAI's convention: evaluation seeds from 10**9)
    [VALID_SEED_START, ...)               validation rollouts, which choose the best checkpoint during training
"""

import math
import numbers

TEST_SEED_START = 10**9
VALID_SEED_START = 1_500_000_000
#: The largest episode seed taken (gymnasium's reset takes any non-negative integer; these fit every RNG).
MAX_SEED = 2**31 - 1


def check_seed(seed: object) -> int:
    """An episode seed as an int in [0, MAX_SEED]; a ValueError saying what a seed is for anything else (a
    fraction, a negative number, a string, a bool)."""
    try:
        whole = isinstance(seed, numbers.Real) and not isinstance(seed, bool) and math.isfinite(seed) \
            and seed == int(seed)
    except OverflowError:  # an int too large for a float
        whole = False
    if not whole or not 0 <= int(seed) <= MAX_SEED:
        shown = repr(seed) if len(repr(seed)) <= 40 else repr(seed)[:40] + "..."
        raise ValueError(f"the seed must be a whole number from 0 to {MAX_SEED}, got {shown}")
    return int(seed)


__all__ = ["MAX_SEED", "TEST_SEED_START", "VALID_SEED_START", "check_seed"]
