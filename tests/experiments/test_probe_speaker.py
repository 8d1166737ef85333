"""experiments/probe_speaker.py: the linear probe and the labels it reads off the last frame."""

from __future__ import annotations

import probe_speaker
import pytest
import torch
from conftest import TINY_MODEL


def test_linear_probe_separable_and_uninformative_features():
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 3, (300,), generator=generator)
    informative = torch.nn.functional.one_hot(labels, 3).float() + 0.01 * torch.randn(300, 3, generator=generator)
    result = probe_speaker.linear_probe(informative, labels)
    assert result["accuracy"] == 1.0 and result["test_examples"] == 60
    noise = torch.randn(300, 3, generator=generator)
    constant = torch.zeros(300, dtype=torch.long)
    assert probe_speaker.linear_probe(noise, constant) == {"accuracy": 1.0, "majority": 1.0, "test_examples": 60}
    with pytest.raises(ValueError, match="both sides"):
        probe_speaker.linear_probe(noise[:1], constant[:1])


def test_features_label_the_object_in_front_at_the_last_step(tiny_demos):
    from msvae_hf import MSVAEConfig, MSVAEModel, MSVAETokenizer
    from msvae_hf.data.collator import decode_frames, for_loader, read_rows
    from msvae_hf.data.demos import load_demos

    tok = MSVAETokenizer.from_grammar()
    model = MSVAEModel(MSVAEConfig(**{**TINY_MODEL, "vocab_size": len(tok)})).eval()
    model.tokenizer = tok
    split = load_demos(tiny_demos)["unpaired"]
    rows = read_rows(for_loader(split), range(len(split)))
    feats, cells = probe_speaker.features(model, rows, batch_size=7)
    fronts = [decode_frames(row["observations"])[len(row["actions"]) - 1, 3, 5] for row in rows]
    expected = [f for f in fronts if f[0] in probe_speaker.OBJECT_TYPES]
    assert 0 < len(expected) < len(rows)  # some end facing an object, some do not
    assert cells.tolist() == [list(map(int, f)) for f in expected]
    config = model.config
    assert feats["last frame"].shape == (len(expected), config.hidden_size)
    assert feats["speaker latent"].shape == (len(expected), config.num_latent_tokens * config.latent_dim)
