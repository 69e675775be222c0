"""Byte-level tokenizer of the tiny models: token id = byte value, then three special tokens.

Bytes need no training and cover any text, so the tiny target models raw UTF-8. The same mapping is
written as a Hugging Face `tokenizer.json` (GPT-2 byte-to-unicode alphabet, BPE with no merges) so
transformers and SGLang load it; `encode` / `decode` here are the trivial equivalent, with no dependency.
"""
from __future__ import annotations

import json
import os

SPECIALS = ("<|endoftext|>", "<|pad|>", "<|MASK|>")
EOS_ID, PAD_ID, MASK_ID = 256, 257, 258
VOCAB_SIZE = 256 + len(SPECIALS)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (the ByteLevel pre-tokenizer's alphabet)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


class ByteTokenizer:
    eos_token_id, pad_token_id, mask_token_id = EOS_ID, PAD_ID, MASK_ID
    vocab_size = VOCAB_SIZE

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        out, parts = bytearray(), []
        for i in ids:
            i = int(i)
            if i < 256:
                out.append(i)
            elif not skip_special_tokens:
                parts.append(out.decode("utf-8", errors="replace") + SPECIALS[i - 256])
                out = bytearray()
        return "".join(parts) + out.decode("utf-8", errors="replace")

    @classmethod
    def from_dir(cls, folder: str) -> "ByteTokenizer":
        """Check that `folder` holds this byte-level layout (the shipped tiny models do)."""
        with open(os.path.join(folder, "tokenizer.json")) as f:
            tj = json.load(f)
        added = {t["content"]: t["id"] for t in tj.get("added_tokens", [])}
        vocab = tj["model"]["vocab"]
        b2u = bytes_to_unicode()
        if any(vocab.get(b2u[b]) != b for b in range(256)) or \
                any(added.get(s) != 256 + i for i, s in enumerate(SPECIALS)):
            raise ValueError(f"{folder!r} is not the byte-level tokenizer the engine knows")
        return cls()


def write_tokenizer(folder: str, model_max_length: int = 4096) -> None:
    """tokenizer.json, tokenizer_config.json and special_tokens_map.json for HF and SGLang."""
    os.makedirs(folder, exist_ok=True)
    b2u = bytes_to_unicode()
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    tj = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": 256 + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, s in enumerate(SPECIALS)],
        "normalizer": None, "pre_tokenizer": byte_level, "post_processor": None, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": {b2u[b]: b for b in range(256)}, "merges": []},
    }
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        json.dump(tj, f, ensure_ascii=False)
    specials = {"eos_token": SPECIALS[0], "pad_token": SPECIALS[1]}
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": model_max_length,
        "clean_up_tokenization_spaces": False, "add_bos_token": False, "add_eos_token": False,
        "additional_special_tokens": [SPECIALS[2]], **specials,
        "added_tokens_decoder": {str(256 + i): {"content": s, "lstrip": False, "normalized": False,
                                                "rstrip": False, "single_word": False, "special": True}
                                 for i, s in enumerate(SPECIALS)},
    }
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(folder, "special_tokens_map.json"), "w") as f:
        json.dump({**specials, "additional_special_tokens": [SPECIALS[2]]}, f, indent=2)
