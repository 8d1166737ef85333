"""BabyAI levels used by the paper (App. C)."""
