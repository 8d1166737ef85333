"""The models: their configs (``configuration_msvae``), the layers they share (``modules``), the baselines
(``modeling_baselines``), MS-VAE (``modeling_msvae``), the family's base class (``modeling_utils``), the follower
and speaker sides they share (``mixins``), frames encoded once (``frames``), why a checkpoint does not load
(``loading``), the loss terms (``losses``) and the tokenizer (``tokenization_msvae``). ``msvae_hf`` re-exports the
public classes."""
