"""What a DDTREE server takes from one request, decided before the request reaches a decode round.

The scheduler asks its DFlash-family request check (`validate_dflash_request`) of every request it admits;
in a DDTREE server the plugin answers instead (adapters/registration.install_request_hooks), so a request the
round cannot serve is finished at once with a message naming DDTree and the fix (an HTTP 400), never raised inside
the scheduler's loop. So is a request stock SGLang itself crashes on (crashes_sglang), refused by the tokenizer
first (tokenizer_refusal), and one whose malformed field SGLang's tokenizer fails on with HTTP 500 (unreadable).
Everything else a request may carry is served by the round (decode_round.py: grammar, sampling filters, penalties,
logit bias, custom processors, logprobs).

The scheduler reserves KV for every request ahead of each round: its committed length + 2 × the verify width
(DFlash's double buffer). Near the context limit that reservation runs past the request's row of
`req_to_token`, whose headroom SGLang sizes as 4 + the width, into the next row's slots — slots then
never freed (the pool's leak check stops the server at idle). `row_headroom` is the headroom DDTree needs.
"""
from __future__ import annotations

import re

from .adapters.registration import top_logprobs_num


def refusal(req) -> str | None:
    """Why a DDTREE server cannot serve `req`, a scheduler's request (None: it can)."""
    if getattr(req, "return_hidden_states", False):
        return ("DDTREE speculative decoding does not return hidden states (return_hidden_states): the verify "
                "computes them for tree nodes, not for the committed tokens alone. Fix: drop return_hidden_states, "
                "or send the request to a server without --speculative-algorithm ddtree")
    if getattr(req, "return_sampling_mask", False):
        return ("DDTREE speculative decoding does not return sampling masks (return_sampling_mask): its rounds do "
                "not capture each token's kept set. Fix: drop return_sampling_mask, or send the request to a server "
                "without --speculative-algorithm ddtree")
    sp = getattr(req, "sampling_params", None)
    why = crashes_sglang(getattr(req, "origin_input_ids", None), getattr(req, "vocab_size", None),
                         top_logprobs_num(req) if getattr(req, "return_logprob", False) else 0,
                         stop_ids=getattr(sp, "stop_token_ids", None))
    if why is not None and sp is not None:  # a refused request still rides one prefill batch to carry its answer:
        sp.stop_token_ids = None  # the min_new_tokens penalty of that batch must not read its stop ids
    return why


def crashes_sglang(ids, vocab, top_logprobs: int = 0, logprob_start_len: int = -1, stop_ids=None) -> str | None:
    """Why a request would crash the scheduler's loop (None: it would not). Stock SGLang (0.5.17 and 0.5.23, with or
    without speculation) admits an empty prompt (the logits processor then indexes an empty batch row), token ids
    outside [0, vocab) (the embedding indexes past its table), more top log-probs than the vocabulary has (the
    sampler's top-k), a logprob_start_len below -1 (the input log-probs' bookkeeping asserts) and stop_token_ids
    outside [0, vocab) (the min_new_tokens penalizer scatters them into a vocabulary row whenever any request of the
    batch has min_new_tokens, this one or another): each raises in the scheduler's loop, which takes the whole
    server down. A DDTREE server refuses them per request: at the tokenizer, before they reach the scheduler
    (logprob_start_len is only seen there), and again at the scheduler's admission, where session and input_embeds
    prompts get their final ids. `logprob_start_len`, `top_logprobs`: as asked where the request returns log-probs,
    else -1 and 0."""
    refused = "DDTREE server refused the request: "
    outside = sorted(t for t in (stop_ids or ()) if t is not None and vocab is not None and not 0 <= t < int(vocab))
    if outside:
        return (f"{refused}stop_token_ids holds {outside[0]}, outside the model's vocabulary 0..{int(vocab) - 1} "
                f"(SGLang's min_new_tokens penalty crashes on it in any batch with min_new_tokens). Fix: send ids "
                f"the model's tokenizer produces")
    if vocab is not None and int(top_logprobs or 0) > int(vocab):
        return (f"{refused}it asks for the top {int(top_logprobs)} log-probs of each token (top_logprobs_num / "
                f"logprobs), more than the model's {int(vocab)} tokens (SGLang's sampler crashes on it). Fix: ask "
                f"for at most {int(vocab)}")
    if logprob_start_len is not None and int(logprob_start_len) < -1:
        return (f"{refused}logprob_start_len is {int(logprob_start_len)} (SGLang's input log-probs crash on a value "
                f"below -1). Fix: send -1 (no prompt log-probs) or a position in the prompt, 0 or more")
    if ids is None:
        return None
    if len(ids) == 0:
        return (f"{refused}its prompt is empty (an empty text, input_ids [] or no input_embeds), so there is no token "
                f"to predict from (SGLang's forward crashes on it). Fix: send at least one token")
    if vocab is None:
        return None
    lo, hi = min(ids), max(ids)
    if lo < 0 or hi >= int(vocab):
        bad = lo if lo < 0 else hi
        return (f"{refused}input_ids holds the token id {bad}, outside the model's vocabulary 0..{int(vocab) - 1} "
                f"(SGLang's embedding crashes on it). Fix: send ids the model's tokenizer produces")
    return None


def tokenizer_refusal(obj, input_ids, vocab) -> str | None:
    """Why the tokenizer of a DDTREE server refuses one request, before it reaches the scheduler (None: it does
    not): crashes_sglang on SGLang's GenerateReqInput (one request of a batch) and its token ids, and a
    positional_embed_overrides that is not SGLang's object (from JSON: the scheduler calls a method of it as it
    takes the request in, so it crashes before any admission check)."""
    overrides = getattr(obj, "positional_embed_overrides", None)
    if overrides is not None and not callable(getattr(overrides, "reconstruct", None)):
        return (f"DDTREE server refused the request: positional_embed_overrides is a {type(overrides).__name__}, not "
                f"SGLang's PositionalEmbeds (which only the Python Engine API can pass; the scheduler crashes on "
                f"anything else). Fix: drop positional_embed_overrides")
    logprob = bool(getattr(obj, "return_logprob", False))
    start = getattr(obj, "logprob_start_len", -1) if logprob else -1
    top = getattr(obj, "top_logprobs_num", 0) if logprob else 0
    if not isinstance(start, int) or not isinstance(top, int):
        return None  # a batch's lists: SGLang checks each request's own (its own validation)
    sp = getattr(obj, "sampling_params", None)
    stop = sp.get("stop_token_ids") if isinstance(sp, dict) else None
    stop = [t for t in stop if isinstance(t, int) and not isinstance(t, bool)] if isinstance(stop, list) else None
    return crashes_sglang(input_ids, vocab, top, -1 if start is None else start, stop)


def unreadable(e: BaseException) -> str | None:
    """The 400 message for an exception SGLang's tokenizer raised on a request before answering it, where the
    exception is Python's own complaint about a value's type, index, key or pattern (a field SGLang's request
    handling reads without checking it: a list as a single request's rid, a list of sampling_params for one
    prompt, an input_embeds row with no entries, a stop_regex that does not compile); stock SGLang answers those
    with HTTP 500. None for anything else (SGLang's own answer stands)."""
    if isinstance(e, ValueError) or not isinstance(e, (TypeError, AttributeError, LookupError, re.error,
                                                       OverflowError, RecursionError)):
        return None
    return (f"DDTREE server refused the request: SGLang could not read it ({type(e).__name__}: {e}). Fix: send each "
            f"field as SGLang's API documents it")


def row_headroom(sglang_extra: int, verify_width: int, page_size: int) -> int:
    """req_to_token columns beyond the context length: the reservation of a request at the context limit
    (2 × the verify width, rounded up to a page), plus SGLang's own 4."""
    return max(int(sglang_extra), 4 + 2 * int(verify_width) + int(page_size) - 1)
