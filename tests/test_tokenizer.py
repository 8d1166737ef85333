"""MSVAETokenizer: grammar vocabulary, round trips on generated missions, save/load, unknown words."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch
from minigrid.core.constants import COLOR_NAMES
from minigrid.envs.babyai.core.verifier import LOC_NAMES, OBJ_TYPES

from msvae_hf.models.tokenization_msvae import SPECIAL_TOKENS, MSVAETokenizer

LEVELS = ("BabyAI-GoToSeq-v0", "BabyAI-BossLevel-v0", "BabyAI-GoToSeqLocal-v0", "BabyAI-BossLocal-v0")
EXAMPLE = "go to the red ball, then pick up a key"


def missions(level: str, n: int, first_seed: int = 0) -> list[str]:
    """Missions of `n` episodes of `level`, skipping the test if the level is not registered."""
    import msvae_hf.envs  # noqa: F401  (registers the Local levels once they exist)

    if level not in gym.registry:
        pytest.skip(f"{level} is not registered (msvae_hf/envs/levels.py)")
    env = gym.make(level)
    try:
        return [env.reset(seed=first_seed + i)[0]["mission"] for i in range(n)]
    finally:
        env.close()


def test_special_ids_and_grammar_words(tok):
    assert [tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3]
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    vocab = tok.get_vocab()
    for word in [*COLOR_NAMES, *OBJ_TYPES, *LOC_NAMES, "object", ",", "then", "after", "and", "put", "open"]:
        assert word in vocab, word
    assert sorted(vocab.values()) == list(range(len(vocab)))


@pytest.mark.parametrize("level", LEVELS)
def test_round_trip_on_level_missions(tok, level):
    texts = missions(level, 250)  # 4 levels x 250 = 1000 instructions
    enc = tok(texts, padding=True, return_tensors="pt")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    assert not (ids == tok.unk_token_id).any()
    assert (ids[:, 0] == tok.bos_token_id).all()
    lengths = mask.sum(1)
    assert (ids[torch.arange(len(texts)), lengths - 1] == tok.eos_token_id).all()
    assert (ids[mask == 0] == tok.pad_token_id).all()
    assert tok.batch_decode(ids, skip_special_tokens=True) == texts


def test_encode_layout_and_comma(tok):
    ids = tok(EXAMPLE)["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == [
        "<bos>", "go", "to", "the", "red", "ball", ",", "then", "pick", "up", "a", "key", "<eos>",
    ]
    assert tok.decode(ids, skip_special_tokens=True) == EXAMPLE


def test_any_decoded_sequence_reads_back_the_same(tok):
    """A speaker can emit any token sequence, e.g. two commas in a row; its decoded text (a pseudo-label) must
    encode back to the same ids, not to one unknown word ",,"."""
    words = [["go", "to", "the", "ball", ",", ",", "then", "open", "a", "door"], [",", "go", ",", ",", ","]]
    ids = [tok.convert_tokens_to_ids(w) for w in words]
    texts = tok.batch_decode(ids)
    assert texts[0] == "go to the ball,, then open a door"
    assert tok(texts, add_special_tokens=False)["input_ids"] == ids


def test_save_load_round_trip(tok, tmp_path):
    tok.save_pretrained(tmp_path)
    loaded = MSVAETokenizer.from_pretrained(tmp_path)
    assert loaded.get_vocab() == tok.get_vocab()
    assert loaded.allow_unknown is False
    texts = [EXAMPLE, "put the blue box next to a door after you go to the grey ball on your left"]
    assert loaded(texts)["input_ids"] == tok(texts)["input_ids"]
    assert loaded.batch_decode(loaded(texts)["input_ids"], skip_special_tokens=True) == texts


def test_unknown_word_is_an_error_naming_it(tok):
    with pytest.raises(ValueError, match="'pink'"):
        tok("go to the pink ball")
    with pytest.raises(ValueError, match="'fetch'"):
        tok([EXAMPLE, "fetch the red ball"], padding=True)
    with pytest.raises(ValueError, match=r"'\.', 'Go' \(BabyAI's instructions are lowercase words and commas, "
                                         r"e\.g\. .* set the model's tokenizer.allow_unknown = True\)"):
        tok("Go to the red ball.")


def test_allow_unknown_maps_to_unk(tok, tmp_path):
    ids = tok("go to the pink ball", allow_unknown=True)["input_ids"]
    go_to_the, ball = tok.convert_tokens_to_ids(["go", "to", "the"]), tok.convert_tokens_to_ids("ball")
    assert ids == [1, *go_to_the, 3, ball, 2]
    lenient = MSVAETokenizer.from_grammar(allow_unknown=True)
    assert lenient("go to the pink ball")["input_ids"] == ids
    lenient.save_pretrained(tmp_path)
    assert MSVAETokenizer.from_pretrained(tmp_path)("go to the pink ball")["input_ids"] == ids


def test_auto_tokenizer_when_registered(tok, tmp_path):
    from transformers import AutoTokenizer
    from transformers.models.auto.tokenization_auto import REGISTERED_TOKENIZER_CLASSES

    import msvae_hf  # noqa: F401  (its __init__ registers the tokenizer with AutoTokenizer)

    if REGISTERED_TOKENIZER_CLASSES.get("MSVAETokenizer") is not MSVAETokenizer:
        pytest.skip("MSVAETokenizer is not registered with AutoTokenizer yet (msvae_hf/__init__.py)")
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert isinstance(loaded, MSVAETokenizer)
    assert loaded(EXAMPLE)["input_ids"] == tok(EXAMPLE)["input_ids"]


def test_every_babyai_level_encodes_without_unknowns(tok):
    levels = [name for name in gym.registry if name.startswith("BabyAI-")]
    for level in levels:
        texts = missions(level, 20, first_seed=1000)
        assert tok.unknown_words(" ".join(texts)) == [], level
        assert tok.batch_decode(tok(texts)["input_ids"], skip_special_tokens=True) == texts, level
