"""Compare our decoding with CTranslate2, a dedicated inference engine, on the published model (issue 22).

CTranslate2 is not a dependency of the package: run this with a scratch environment that has it,
torch and sentencepiece, and this repository's ``src`` on the path::

    python3 -m venv /tmp/ct2env
    /tmp/ct2env/bin/pip install ctranslate2 sentencepiece torch numpy sacrebleu
    export PYTHONPATH=src
    /tmp/ct2env/bin/python tools/ctranslate2_compare.py convert --out /tmp/ct2-multi30k
    /tmp/ct2env/bin/python tools/ctranslate2_compare.py compare --model /tmp/ct2-multi30k
    /tmp/ct2env/bin/python tools/ctranslate2_compare.py translate --model /tmp/ct2-multi30k

``convert`` writes the published weights into a CTranslate2 ``TransformerSpec``: post-norm
(``pre_norm=False``), LayerNorm eps 1e-6, embeddings times sqrt(d_model) (``scale_embeddings``),
tied output projection, and our position table (``aiayn.embeddings.sinusoidal_encoding``, sine and
cosine interleaved) written into ``position_encodings.encodings``, since CTranslate2's own table
puts all sines before all cosines. ``compare`` first checks the conversion by scoring reference
translations teacher-forced with both (the largest difference of a token's log-probability),
then translates with both and prints sacreBLEU and the share of identical outputs. ``translate``
translates alone and prints sentences per second (for timing whole processes against
``tools/measure_decoding.py``). Issue 22 timed, in turn (A B A B ...), one thread, all 1,000 test
sentences, beam 4, α 0.6::

    OMP_NUM_THREADS=1 .venv/bin/python tools/measure_decoding.py --all                      # A
    OMP_NUM_THREADS=1 PYTHONPATH=src /tmp/ct2env/bin/python tools/ctranslate2_compare.py \
        translate --model /tmp/ct2-multi30k --all                                          # B

What cannot be matched: CTranslate2's length penalty divides log P by ``length ** α``, ours
(GNMT) by ``((5 + length) / 6) ** α``; its beam search stops a sentence once ``beam_size``
hypotheses have finished, ours keeps finished beams in the beam until all K have ended; and its
``max_decoding_length`` is one number per call, ours ``a · S + b`` per sentence. The last one is
set from the batch's longest source and never binds on Multi30k (``compare`` counts the outputs
that reach our limit).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import ctranslate2
import numpy as np
import torch
from ctranslate2.specs import (
    TransformerDecoderSpec,
    TransformerEncoderSpec,
    TransformerSpec,
)

from aiayn.data.multi30k import load_multi30k
from aiayn.decoding.translate import source_ids, translate
from aiayn.embeddings import sinusoidal_encoding
from aiayn.runs.published import load_published

SHARED = Path(__file__).resolve().parents[2] / "shared"


def _array(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy()


def _linear(spec, *linears) -> None:
    """Fill a ``LinearSpec`` with one or more ``nn.Linear`` stacked along the output axis."""
    spec.weight = _array(torch.cat([lin.weight for lin in linears]))
    spec.bias = _array(torch.cat([lin.bias for lin in linears]))


def _norm(spec, norm) -> None:
    spec.gamma, spec.beta = _array(norm.weight), _array(norm.bias)


def build_spec(model, tokenizer) -> TransformerSpec:
    """The published ``Transformer`` as a CTranslate2 ``TransformerSpec``."""
    c = model.config
    encoder = TransformerEncoderSpec(c.N, c.h, pre_norm=False)
    decoder = TransformerDecoderSpec(c.N, c.h, pre_norm=False)
    spec = TransformerSpec(encoder, decoder)
    spec.config.layer_norm_epsilon = model.encoder.layers[0].sublayers[0].norm.eps
    table = _array(sinusoidal_encoding(c.max_len, c.d_model))  # interleaved
    for side, embed in ((encoder, model.src_embed), (decoder, model.tgt_embed)):
        tokens = embed[0]  # aiayn.embeddings.Embeddings, times sqrt(d_model)
        embeddings = side.embeddings[0] if side is encoder else side.embeddings
        embeddings.weight = _array(tokens.weight)
        side.scale_embeddings = True
        side.position_encodings.encodings = table
    for ours, theirs in zip(model.encoder.layers, encoder.layer, strict=True):
        a = ours.self_attn
        _linear(theirs.self_attention.linear[0], a.w_q, a.w_k, a.w_v)
        _linear(theirs.self_attention.linear[1], a.w_o)
        _norm(theirs.self_attention.layer_norm, ours.sublayers[0].norm)
        _linear(theirs.ffn.linear_0, ours.feed_forward.w_1)
        _linear(theirs.ffn.linear_1, ours.feed_forward.w_2)
        _norm(theirs.ffn.layer_norm, ours.sublayers[1].norm)
    for ours, theirs in zip(model.decoder.layers, decoder.layer, strict=True):
        a, x = ours.self_attn, ours.cross_attn
        _linear(theirs.self_attention.linear[0], a.w_q, a.w_k, a.w_v)
        _linear(theirs.self_attention.linear[1], a.w_o)
        _norm(theirs.self_attention.layer_norm, ours.sublayers[0].norm)
        _linear(theirs.attention.linear[0], x.w_q)
        _linear(theirs.attention.linear[1], x.w_k, x.w_v)
        _linear(theirs.attention.linear[2], x.w_o)
        _norm(theirs.attention.layer_norm, ours.sublayers[1].norm)
        _linear(theirs.ffn.linear_0, ours.feed_forward.w_1)
        _linear(theirs.ffn.linear_1, ours.feed_forward.w_2)
        _norm(theirs.ffn.layer_norm, ours.sublayers[2].norm)
    _linear(decoder.projection, model.generator)  # tied to the target embeddings
    pieces = [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    return spec


def source_pieces(tokenizer, sentences, max_len) -> list[list[str]]:
    """Each sentence as our pieces, ending in ``</s>`` as our decoder reads it."""
    ids = source_ids(tokenizer, sentences, max_len)
    if any(s is None for s in ids):
        raise ValueError("a sentence has nothing to translate; leave it out")
    return [[tokenizer.id_to_piece(i) for i in s] for s in ids]


def ct2_translate(translator, tokenizer, pieces, cfg, beam, max_len):
    """Translate with CTranslate2 as close to ``aiayn.decoding.translate.translate`` as its API allows."""
    longest = max(len(p) for p in pieces)
    results = translator.translate_batch(
        pieces,
        beam_size=beam,
        length_penalty=cfg.length_penalty,  # divides by length ** α, not GNMT's
        max_batch_size=128,  # sorted by length, as ours
        max_decoding_length=min(
            int(cfg.max_len_a * longest + cfg.max_len_b), max_len - 1
        ),
        max_input_length=0,
    )
    outputs = [r.hypotheses[0] for r in results]
    ids = [[tokenizer.piece_to_id(p) for p in out] for out in outputs]
    return tokenizer.decode_batch(ids), outputs


def sacrebleu(hypotheses, references) -> float:
    from sacrebleu.metrics import BLEU

    return BLEU().corpus_score(hypotheses, [references]).score


def check_scores(model, translator, tokenizer, pieces, references) -> float:
    """The largest difference of a reference token's log-probability, teacher forced."""
    targets = [tokenizer.encode(r) for r in references]
    # CTranslate2 scores each target token and the </s> it appends
    theirs = translator.score_batch(
        pieces, [[tokenizer.id_to_piece(i) for i in t] for t in targets]
    )
    worst = 0.0
    with torch.no_grad():
        for src, tgt, scored in zip(pieces, targets, theirs, strict=True):
            src_ids = torch.tensor([[tokenizer.piece_to_id(p) for p in src]])
            tgt_ids = tgt + [tokenizer.eos_id]
            tgt_in = torch.tensor([[tokenizer.bos_id] + tgt])  # (1, T)
            log_p = model(src_ids, tgt_in).log_softmax(-1)[0]  # (T, V)
            ours = log_p[torch.arange(len(tgt_ids)), tgt_ids]
            diff = (ours - torch.tensor(scored.log_probs)).abs().max()
            worst = max(worst, float(diff))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["convert", "compare", "translate"])
    parser.add_argument("--model", default="/tmp/ct2-multi30k")
    parser.add_argument("--out", default=None, help="convert: the folder")
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--split", default="test2016")
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--compute-type", default="float32")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--run", default=str(SHARED / "runs/multi30k-h100"))
    parser.add_argument("--data", default=str(SHARED / "data/multi30k"))
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    published = load_published(args.run, download=False)
    cfg, tokenizer, model = published[:3]
    if args.command == "convert":
        spec = build_spec(model, tokenizer)
        spec.validate()
        spec.optimize(quantization=None)  # float32 as stored
        out = Path(args.out or args.model)
        out.mkdir(parents=True, exist_ok=True)
        spec.save(str(out))
        print(f"wrote {out}")
        return

    pairs = load_multi30k(args.split, args.data)
    pairs = pairs if args.all else pairs[: args.sentences]
    sentences, references = [s for s, _ in pairs], [t for _, t in pairs]
    translator = ctranslate2.Translator(
        args.model,
        device="cpu",
        compute_type=args.compute_type,
        intra_threads=args.threads,
        inter_threads=1,
    )
    max_len = model.config.max_len
    pieces = source_pieces(tokenizer, sentences, max_len)
    start = time.perf_counter()
    theirs, outputs = ct2_translate(
        translator, tokenizer, pieces, cfg, args.beam, max_len
    )
    seconds = time.perf_counter() - start
    print(
        f"CTranslate2 {ctranslate2.__version__} ({args.compute_type}, "
        f"{args.threads} thread(s), beam {args.beam}, α {cfg.length_penalty}): "
        f"{len(sentences)} sentences in {seconds:.2f} s, "
        f"{len(sentences) / seconds:.1f} sentences/s"
    )
    if args.command == "translate":
        return
    worst = check_scores(model, translator, tokenizer, pieces, references)
    print(f"teacher-forced log-probabilities: largest difference {worst:.2e}")
    ours = translate(model, tokenizer, sentences, beam=args.beam, log=print)
    same = sum(a == b for a, b in zip(ours, theirs, strict=True))
    at_limit = sum(
        len(out) + 1 >= int(cfg.max_len_a * len(src) + cfg.max_len_b)
        for out, src in zip(outputs, pieces, strict=True)
    )
    print(f"sacreBLEU ours {sacrebleu(ours, references):.2f}")
    print(f"sacreBLEU CTranslate2 {sacrebleu(theirs, references):.2f}")
    print(
        f"identical: {same}/{len(sentences)} ({100 * same / len(sentences):.1f} %); "
        f"outputs at the length limit: {at_limit}"
    )


if __name__ == "__main__":
    main()
