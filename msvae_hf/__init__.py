"""msvae-hf: MS-VAE (Akuzawa, Iwasawa, Matsuo, IJCAI 2022) for BabyAI, Hugging Face-native.

Importing the package registers the BabyAI Local levels with gymnasium and the models, configs and
tokenizer with transformers' Auto classes, so ``AutoModel.from_pretrained(dir)`` needs no remote code.
"""

from transformers import AutoConfig, AutoModel, AutoTokenizer

from . import envs  # noqa: F401  (registers BabyAI-GoToSeqLocal-v0 / BabyAI-BossLocal-v0)
from .models.configuration_msvae import FollowerConfig, ModulesConfig, MSVAEConfig, SpeakerConfig
from .models.modeling_baselines import FollowerModel, SpeakerModel
from .models.modeling_msvae import MSVAEModel, MSVAEOutput
from .models.tokenization_msvae import MSVAETokenizer

__version__ = "0.1.0"

for _config, _model in ((MSVAEConfig, MSVAEModel), (FollowerConfig, FollowerModel), (SpeakerConfig, SpeakerModel)):
    AutoConfig.register(_config.model_type, _config, exist_ok=True)
    AutoModel.register(_config, _model, exist_ok=True)
    AutoTokenizer.register(_config, tokenizer_class=MSVAETokenizer, exist_ok=True)

__all__ = [
    "ModulesConfig", "MSVAEConfig", "FollowerConfig", "SpeakerConfig", "MSVAEModel", "MSVAEOutput", "FollowerModel",
    "SpeakerModel", "MSVAETokenizer",
]
