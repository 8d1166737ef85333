"""Expert demonstrations (BabyAI bot -> HF datasets) and batching."""
