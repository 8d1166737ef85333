"""msvae-hf: MS-VAE (Akuzawa, Iwasawa, Matsuo, IJCAI 2022) for BabyAI, Hugging Face-native.

Importing the package registers the BabyAI Local levels with gymnasium and the models, configs and
tokenizer with transformers' Auto classes.
"""

from . import envs  # noqa: F401  (registers BabyAI-GoToSeqLocal-v0 / BabyAI-BossLocal-v0)
from .configuration_msvae import FollowerConfig, MSVAEConfig, SpeakerConfig

__version__ = "0.1.0"

__all__ = ["MSVAEConfig", "FollowerConfig", "SpeakerConfig"]
