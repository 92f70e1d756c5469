"""A byte-level BPE tokenizer trained on the tiny world's corpus (the `tokenizers` package), saved as an HF
``tokenizer.json`` so the target directory loads with transformers' ``AutoTokenizer`` like a real checkpoint.

Special tokens: pad, end of text (EOS), the drafter's mask token, and the two chat-turn markers that frame a
record as ``<|user|>prompt<|assistant|>answer<|endoftext|>``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from simulator.errors import UserError

PAD, EOS, MASK, USER, ASSISTANT = "<|pad|>", "<|endoftext|>", "<|mask|>", "<|user|>", "<|assistant|>"
SPECIAL_TOKENS = [PAD, EOS, MASK, USER, ASSISTANT]


def format_prompt(prompt: str) -> str:
    return f"{USER}{prompt}{ASSISTANT}"


def format_record(prompt: str, answer: str) -> str:
    return f"{USER}{prompt}{ASSISTANT}{answer}{EOS}"


def train_tokenizer(texts: Iterable[str], vocab_size: int, path: Path):
    """Train byte-level BPE and save it to ``path``; returns the transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tok.save(str(tmp))
    tmp.replace(path)
    return load_tokenizer(path)


def load_tokenizer(path: Path):
    """The transformers fast tokenizer from a ``tokenizer.json`` file or a directory holding one."""
    from transformers import PreTrainedTokenizerFast

    path = Path(path)
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise UserError(f"{file}: tokenizer not found; run `dspark build-tiny` first")
    return PreTrainedTokenizerFast(tokenizer_file=str(file), pad_token=PAD, eos_token=EOS, mask_token=MASK,
                                   additional_special_tokens=[USER, ASSISTANT])
