"""A word-level tokenizer with exactly V tokens ("t0" ... "t{V-1}", space-separated), for dummy-weight
models whose vocabulary has no real tokenizer here: every id decodes to a non-empty word and every word
encodes back to its id, so sglang.bench_serving can count and time the streamed tokens.
usage: python scripts/mk_wordlevel_tokenizer.py DIR VOCAB_SIZE"""
import json
import os
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

out, vocab = sys.argv[1], int(sys.argv[2])
os.makedirs(out, exist_ok=True)
tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
tok.save(os.path.join(out, "tokenizer.json"))
json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1 << 20, "eos_token": "t0"},
          open(os.path.join(out, "tokenizer_config.json"), "w"))
