"""The "tiny-qwen2" preset: a corpus-trained byte-level BPE tokenizer plus a random-init Qwen2.

No pretrained weights can be downloaded here, so tests and CPU runs use a small random model. Its
tokenizer is trained from the environment's own text (commands, object names, templates), so short
commands such as "go north" are 2-3 tokens and episodes stay short in tokens.

Every process (env runners, learners, possibly on other machines) builds the preset independently,
so the build must be deterministic: the BPE trainer has no randomness once the initial alphabet is
the fixed 256-byte ByteLevel alphabet (its ids are sorted), and the model init runs under a fixed
seed in a forked RNG.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

from hgpo_rllib.rl_module.config import TINY_MODEL_DEFAULTS

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)

# Plain ChatML (Qwen's format without Qwen's default system prompt).
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Always part of the training text, so the ChatML scaffolding gets its own tokens whatever the corpus.
_BASE_CORPUS = (
    "system\nuser\nassistant\n",
    "You are a helpful assistant.",
)

# Derived from the tokenizer; overriding them would desynchronise model and tokenizer.
_TOKENIZER_DERIVED_KEYS = ("vocab_size", "bos_token_id", "eos_token_id", "pad_token_id")


def build_tiny_tokenizer(
    corpus: Iterable[str] | None, vocab_size: int, whole_tokens: Sequence[str] = ()
) -> PreTrainedTokenizerFast:
    """Train a deterministic byte-level BPE (no UNK: all 256 bytes are in the vocab) on ``corpus``.

    Each text of ``whole_tokens`` (e.g. an env's commands, "go north") is added as one token, so a
    from-scratch model emits a command in a single step (the model's ``action_vocabulary``).

    Normaliser and pre-tokeniser are exactly Qwen2's (NFC + Qwen2 split regex + ByteLevel), because
    transformers v5 rebuilds a ``Qwen2Tokenizer`` with those when ``AutoTokenizer`` reloads a qwen2
    checkpoint; any other pre-tokeniser would silently change the ids after ``save_pretrained``.
    """
    min_vocab = 256 + len(SPECIAL_TOKENS)
    if vocab_size < min_vocab:
        raise ValueError(f"tokenizer_vocab_size={vocab_size} must be >= {min_vocab} (256 bytes + specials)")
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([*_BASE_CORPUS, *(corpus or ())], trainer=trainer)
    tok.add_tokens([AddedToken(text, normalized=False) for text in dict.fromkeys(whole_tokens)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        padding_side="left",
        clean_up_tokenization_spaces=False,
        chat_template=CHATML_TEMPLATE,
    )


def build_tiny_model(
    tokenizer: PreTrainedTokenizerFast, overrides: Mapping[str, Any], seed: int
) -> Qwen2ForCausalLM:
    """Random-init float32 Qwen2 sized for ``tokenizer``; ``overrides`` are Qwen2Config fields."""
    valid = set(Qwen2Config().to_dict())
    for key in overrides:
        if key in _TOKENIZER_DERIVED_KEYS:
            raise ValueError(
                f"model_config['tiny_model'][{key!r}] cannot be set: it comes from the tokenizer"
            )
        if key not in valid:
            raise ValueError(f"model_config['tiny_model'] has unknown Qwen2Config field {key!r}")
    config = Qwen2Config(
        **{**TINY_MODEL_DEFAULTS, **overrides},
        vocab_size=len(tokenizer),
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Qwen2ForCausalLM(config).eval()
