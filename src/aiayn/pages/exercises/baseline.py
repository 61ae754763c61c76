"""Exercises of the recurrent baseline (page 1.4): the shapes and the sequential chain of RNNsearch.

Each function computes one exercise's truths from the package; ``TRUTHS`` maps the exercise's id
(section.number, as the page names it) to it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .truth import Truth


def _rnn_sizes() -> dict[str, Truth]:
    """1.4.1: memory shape, attention parameters and GRU steps of a small ``RNN``."""
    from ...baselines.rnn import RNN, RNNConfig
    from ...model import count_parameters

    B, S, T = 2, 7, 9
    config = RNNConfig(
        50, 50, d_model=24, d_hidden=32, d_attn=16, dropout=0.0
    )
    # a seed of its own: the reader's random numbers are left alone
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        rnn = RNN(config).eval()
        src = torch.randint(3, 50, (B, S))
        tgt = torch.randint(3, 50, (B, T))
    calls = []  # one entry per call of the decoder's GRU cell
    hook = rnn.decoder.cell.register_forward_hook(lambda *_: calls.append(1))
    try:
        with torch.no_grad():
            memory = rnn.encode(src)
            rnn.decode(memory, None, tgt)
    finally:
        hook.remove()
    return {
        "memory": Truth(
            tuple(memory.shape),
            "one state per source token, and each state joins the "
            "forward and the backward GRU's",
        ),
        "parameters": Truth(
            count_parameters(rnn.decoder.attention),
            "W maps the decoder state, U a source state (with a bias), "
            "v the tanh's output to one score",
        ),
        "cell_calls": Truth(
            len(calls),
            "in training the whole target is known, yet each state "
            "needs the one before it",
        ),
    }


TRUTHS: dict[str, Callable[[], dict[str, Truth]]] = {
    "1.4.1": _rnn_sizes,
}
