"""The models the paper compared itself with, built to train through the same pipeline.

``rnn``: RNNsearch (Bahdanau et al. 2014), a bidirectional GRU encoder and a GRU decoder with
additive attention; the presets ``rnn`` and ``rnn-smoke`` train it (``aiayn.runs.presets``).
"""

from .rnn import RNN, AdditiveAttention, RNNConfig, RNNDecoder, RNNEncoder

__all__ = [
    "RNN",
    "RNNConfig",
    "AdditiveAttention",
    "RNNEncoder",
    "RNNDecoder",
]
