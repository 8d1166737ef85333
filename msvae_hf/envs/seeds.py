"""Episode seed ranges. ``env.reset(seed=s)`` fixes a BabyAI episode, so disjoint ranges keep every evaluated
episode out of the demonstrations and the test episodes out of model selection::

    [0, TEST_SEED_START)                  demonstrations, every split of every dataset (msvae_hf.data.demos)
    [TEST_SEED_START, VALID_SEED_START)   test rollouts (BabyAI's convention: evaluation seeds from 10**9)
    [VALID_SEED_START, ...)               validation rollouts, which choose the best checkpoint during training
"""

TEST_SEED_START = 10**9
VALID_SEED_START = 1_500_000_000

__all__ = ["TEST_SEED_START", "VALID_SEED_START"]
