"""BabyAI levels used by the paper (App. C). Importing this registers the Local levels with gymnasium."""

from .levels import BOSS_LOCAL_ID, GOTOSEQ_LOCAL_ID, LEVELS, BossLocal, GoToSeqLocal, resolve_level

__all__ = ["BOSS_LOCAL_ID", "GOTOSEQ_LOCAL_ID", "LEVELS", "BossLocal", "GoToSeqLocal", "resolve_level"]
