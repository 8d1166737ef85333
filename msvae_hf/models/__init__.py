"""The models: their configs (``configuration_msvae``), the layers they share (``modules``), the baselines
(``modeling_baselines``), MS-VAE (``modeling_msvae``), the family's base class and mixins (``modeling_utils``), the
loss terms (``losses``) and the tokenizer (``tokenization_msvae``). ``msvae_hf`` re-exports the public classes."""
