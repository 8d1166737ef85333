"""Word-level tokenizer for BabyAI instructions, with a vocabulary derived from BabyAI's grammar.

BabyAI writes every mission with the ``surface()`` methods of ``minigrid/envs/babyai/core/verifier.py``
(``ObjDesc``, ``GoToInstr``, ``PickupInstr``, ``PutNextInstr``, ``OpenInstr``, ``BeforeInstr``,
``AfterInstr``, ``AndInstr``). Its language is closed: :meth:`MSVAETokenizer.from_grammar` lists every
word those methods can emit, so every valid instruction of every BabyAI level encodes without unknowns.

Encoding is ``<bos> w_1 .. w_n <eos>``; the comma is its own token and decodes back to ``"ball, then"``.
"""

from __future__ import annotations

from typing import Any

from tokenizers import Tokenizer, decoders, pre_tokenizers, processors
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")  # ids 0, 1, 2, 3

# Fixed words of the surface() methods in minigrid/envs/babyai/core/verifier.py, phrase by phrase.
GRAMMAR_PHRASES = (
    "the", "a", "object",  # ObjDesc: article, "object" when the type is unspecified
    "in front of you", "behind you", "on your left", "on your right",  # ObjDesc locations
    "go to", "pick up", "put next to", "open",  # GoTo, Pickup, PutNext, Open
    ", then", "after you", "and",  # Before, After, And
)


def grammar_words() -> list[str]:
    """Every word BabyAI's instruction grammar can produce (colors and types read from minigrid)."""
    from minigrid.core.constants import COLOR_NAMES
    from minigrid.envs.babyai.core.verifier import LOC_NAMES, OBJ_TYPES

    words = {w for phrase in GRAMMAR_PHRASES for w in phrase.replace(",", " , ").split()}
    words.update(COLOR_NAMES, OBJ_TYPES, LOC_NAMES)
    return sorted(words)


def _strings(inputs: Any) -> list[str]:
    """All strings in a (nested) list/tuple of texts, pairs or pre-split words."""
    if isinstance(inputs, str):
        return [inputs]
    if isinstance(inputs, (list, tuple)):
        return [s for item in inputs for s in _strings(item)]
    return []


class MSVAETokenizer(PreTrainedTokenizerFast):
    """Word-level BabyAI tokenizer: ``<pad>=0, <bos>=1, <eos>=2, <unk>=3``, then words.

    Args:
        vocab: token -> id; ``None`` builds the grammar vocabulary (see :meth:`from_grammar`).
        allow_unknown: map out-of-vocabulary words to ``<unk>`` instead of raising ``ValueError``. Saved in
            ``tokenizer_config.json``; a call may also pass ``allow_unknown=True``.
    """

    model = WordLevel
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, vocab: dict[str, int] | None = None, allow_unknown: bool = False, **kwargs: Any):
        if vocab is None:
            vocab = self.grammar_vocab()
        for token_id, token in enumerate(SPECIAL_TOKENS):
            if vocab.get(token) != token_id:
                raise ValueError(f"vocab must map {token!r} to {token_id}, got {vocab.get(token)!r}")
        self.allow_unknown = allow_unknown
        tokenizer = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
        # words, and each "," as its own token: a speaker's decoded ", ," reads back as two commas
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation("isolated")]
        )
        # The WordPiece decoder joins words with spaces and its cleanup glues the comma: "ball, then".
        tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=True)
        tokenizer.post_processor = processors.TemplateProcessing(
            single="<bos> $A <eos>",
            pair="<bos> $A <eos> $B <eos>",
            special_tokens=[("<bos>", 1), ("<eos>", 2)],
        )
        self._tokenizer = tokenizer
        names = ("pad_token", "bos_token", "eos_token", "unk_token")
        for key, token in zip(names, SPECIAL_TOKENS, strict=True):
            kwargs.setdefault(key, token)
        kwargs.pop("post_processor", None)  # ours, not one read back from tokenizer.json
        super().__init__(allow_unknown=allow_unknown, **kwargs)

    @staticmethod
    def grammar_vocab() -> dict[str, int]:
        """Special tokens, then the grammar's words in sorted order."""
        return {token: i for i, token in enumerate([*SPECIAL_TOKENS, *grammar_words()])}

    @classmethod
    def from_grammar(cls, allow_unknown: bool = False, **kwargs: Any) -> MSVAETokenizer:
        """The tokenizer whose vocabulary is BabyAI's whole instruction grammar."""
        return cls(vocab=cls.grammar_vocab(), allow_unknown=allow_unknown, **kwargs)

    def unknown_words(self, text: str | list[str]) -> list[str]:
        """Words of ``text`` (a string, or a list of pre-split words) that are not in the vocabulary."""
        if not isinstance(text, str):
            text = " ".join(text)
        for token in self.all_special_tokens:
            text = text.replace(token, " ")
        vocab = self._tokenizer.get_vocab()
        pieces = self._tokenizer.pre_tokenizer.pre_tokenize_str(text)
        return [word for word, _ in pieces if word not in vocab]

    def _encode_plus(self, text: Any, text_pair: Any = None, **kwargs: Any):
        allow_unknown = kwargs.pop("allow_unknown", self.allow_unknown)
        encoded = super()._encode_plus(text, text_pair=text_pair, **kwargs)
        unk_id = self.unk_token_id
        if not allow_unknown and any(unk_id in e.ids for e in encoded.encodings or []):
            unknown = sorted({w for t in _strings((text, text_pair)) for w in self.unknown_words(t)})
            if unknown:
                raise ValueError(
                    f"word(s) not in the MSVAETokenizer vocabulary: {', '.join(map(repr, unknown))} (BabyAI's "
                    "instructions are lowercase words and commas, e.g. 'go to the red ball, then pick up a key'; to "
                    "map unknown words to <unk>, pass "
                    "allow_unknown=True to the tokenizer, or set the model's tokenizer.allow_unknown = True)"
                )
        return encoded


__all__ = ["MSVAETokenizer", "grammar_words"]
