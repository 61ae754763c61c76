"""Exercises of the recurrent baseline (page 1.4): the shapes and the sequential chain of RNNsearch,
and how a batch's sentence length sets the chain's length and width.

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


def _batch_chain() -> dict[str, Truth]:
    """1.4.2: sentences in a batch of 2,048 positions and the GRU cell's chain, at T = 10 and 30."""
    from ...baselines.rnn import RNN, RNNConfig
    from ...data.multi30k import make_batches
    from ...training.batches import PaddedPairs

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        rnn = RNN(RNNConfig(20, 20, d_model=8, d_hidden=8, d_attn=8)).eval()
    truths = {}
    for length in (10, 30):  # pieces a side, <eos> included
        pairs = [([5] * (length - 1), [6] * (length - 1))] * 200
        first = make_batches(pairs, 2048, shuffle=False)[0]
        batch = PaddedPairs(pairs).batch(first)
        steps: list[int] = []
        hook = rnn.decoder.cell.register_forward_hook(
            lambda *_, steps=steps: steps.append(1)
        )
        try:
            with torch.no_grad():
                memory = rnn.encode(batch.src)
                rnn.decode(memory, None, batch.tgt_in)
        finally:
            hook.remove()
        truths[f"rows_{length}"] = Truth(
            len(first),
            "the budget counts padded positions of the source and the "
            "target together",
        )
        truths[f"calls_{length}"] = Truth(
            len(steps),
            "one call per target position, whatever the number of rows",
        )
    return truths


TRUTHS: dict[str, Callable[[], dict[str, Truth]]] = {
    "1.4.1": _rnn_sizes,
    "1.4.2": _batch_chain,
}
