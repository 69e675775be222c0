"""What a DDTREE server takes from one request, decided before the request reaches a decode round.

The scheduler asks its DFlash-family request check (`validate_dflash_request`) of every request it admits;
in a DDTREE server the plugin answers instead (adapters/registration.install_request_hooks), so a request the
round cannot serve is finished at once with a message naming DDTree and the fix (an HTTP 400), never raised inside the
scheduler's loop. Everything else a request may carry is served by the round (decode_round.py: grammar,
sampling filters, penalties, logit bias, custom processors, logprobs).

The scheduler reserves KV for every request ahead of each round: its committed length + 2 × the verify width
(DFlash's double buffer). Near the context limit that reservation runs past the request's row of
`req_to_token`, whose headroom SGLang sizes as 4 + the width, into the next row's slots — slots then
never freed (the pool's leak check stops the server at idle). `row_headroom` is the headroom DDTree needs.
"""
from __future__ import annotations


def refusal(req) -> str | None:
    """Why a DDTREE server cannot serve `req` (None: it can)."""
    if getattr(req, "return_hidden_states", False):
        return ("DDTREE speculative decoding does not return hidden states (return_hidden_states): the verify "
                "computes them for tree nodes, not for the committed tokens alone. Fix: drop return_hidden_states, "
                "or send the request to a server without --speculative-algorithm ddtree")
    return None


def row_headroom(sglang_extra: int, verify_width: int, page_size: int) -> int:
    """req_to_token columns beyond the context length: the reservation of a request at the context limit
    (2 × the verify width, rounded up to a page), plus SGLang's own 4."""
    return max(int(sglang_extra), 4 + 2 * int(verify_width) + int(page_size) - 1)
