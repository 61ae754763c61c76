"""Each input that was silent or unclear now gets one clear error: what was expected, what arrived, what to do.

The commands print one line ``error: ...`` and exit with status 2; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import gzip
import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from aiayn import bench, cli
from aiayn import evaluate as evaluate_cli
from aiayn import train as train_cli
from aiayn.attention import MultiHeadAttention
from aiayn.data import multi30k as D
from aiayn.decoding.search import gnmt_length_penalty, length_penalty_limit
from aiayn.decoding.translate import translate
from aiayn.export import scores
from aiayn.export import translator as tr
from aiayn.loss import LabelSmoothingLoss
from aiayn.model import Transformer, TransformerConfig
from aiayn.runs.scoring import evaluate
from aiayn.schedule import make_optimizer, noam_rate, noam_scheduler
from aiayn.training.batches import copy_task_batches
from aiayn.training.loop import fit

pytestmark = pytest.mark.usefixtures("one_thread")


def command_error(main, argv, capsys) -> str:
    """Run a command that must fail as bad usage; return its one line of stderr."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


# --- The commands ---------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", ["-5", "0"])
def test_evaluate_limit_below_one(limit, capsys, tmp_path):
    err = command_error(evaluate_cli.main, [str(tmp_path), "--limit", limit], capsys)
    assert err == (
        f"error: argument --limit: expected an integer >= 1, got {limit} (see python -m aiayn.evaluate --help)\n"
    )


@pytest.mark.parametrize("limit", [-5, 0])
def test_evaluate_function_rejects_a_limit_below_one(limit, tmp_path):
    with pytest.raises(ValueError, match=rf"limit must be an integer >= 1, got {limit}"):
        evaluate(tmp_path, limit=limit)


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--vocab", "3", "vocab_size must be an integer >= 5, got 3"),
        ("--seq-len", "0", "argument --seq-len: expected an integer >= 1, got 0"),
        ("--max-tokens", "0", "argument --max-tokens: expected an integer >= 1, got 0"),
        ("--max-tokens", "10", "max_tokens must be an integer >= 34, got 10"),  # one pair of 16 + <eos>
        ("--peak-tflops", "-1", "argument --peak-tflops: expected a finite number > 0, got -1"),
        ("--peak-tflops", "inf", "argument --peak-tflops: expected a finite number > 0, got inf"),
        ("--peak-tflops", "nan", "argument --peak-tflops: expected a finite number > 0, got nan"),
        ("--peak-tflops", "1e400", "argument --peak-tflops: expected a finite number > 0, got 1e400"),
        ("--compile-backend", "nope", "compile_backend must be one of"),
        ("--steps", "x", "argument --steps: expected an integer >= 1, got 'x'"),
    ],
)
def test_bench_rejects_bad_sizes(flag, value, message, capsys):
    err = command_error(bench.main, ["--device", "cpu", flag, value], capsys)
    assert message in err


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e400", "1e308", "-1"])
def test_evaluate_refuses_a_length_penalty_that_is_not_a_finite_number_while_parsing(value, tmp_path, capsys):
    err = command_error(evaluate_cli.main, [str(tmp_path / "no-run"), f"--length-penalty={value}"], capsys)
    assert err.startswith(
        f"error: argument --length-penalty: expected a length penalty alpha in [0, 13], got {value}"
    )  # refused by its type: the run folder (which does not exist) is never looked at
    assert err.endswith("(see python -m aiayn.evaluate --help)\n") and err.count("\n") == 1


def _alpha_parser():
    p = cli.parser("prog", "a test")
    p.add_argument("--length-penalty", type=cli.length_penalty)
    return p


@pytest.mark.parametrize("value", ["inf", "nan", "1e308", "13.5", "-0.5"])
def test_the_length_penalty_type_names_the_range_and_why(value, capsys):
    err = command_error(lambda argv: cli.run(_alpha_parser(), argv, lambda args: None),
                        ["--length-penalty", value], capsys)  # fmt: skip
    assert err == (
        f"error: argument --length-penalty: expected a length penalty alpha in [0, 13], got {value}: "
        "beyond 13, the penalty ((5 + L) / 6)^alpha of a 5000-token output overflows float32 "
        "(the paper uses 0.6) (see prog --help)\n"
    )


# A command whose Ctrl-C landed in code run by exec() of a string, as dataclasses and PyTorch run while
# they import or trace: CPython then ended the process by SIGINT, whatever status the command gave.
_CTRL_C_IN_EXEC = """
import sys
from aiayn import cli

class Interrupted(Exception):
    pass

def body(args):
    try:
        exec("raise KeyboardInterrupt")
    except KeyboardInterrupt:
        if sys.argv[1] == "reported":
            raise Interrupted("error: interrupted (Ctrl-C); nothing was written") from None
        raise

cli.run(cli.parser("prog", "a test"), [], body, interrupted=(Interrupted,))
"""


@pytest.mark.parametrize(
    ("how", "said"),
    [("bare", "error: interrupted (Ctrl-C)\n"), ("reported", "error: interrupted (Ctrl-C); nothing was written\n")],
)
def test_a_ctrl_c_that_passed_through_exec_of_a_string_still_exits_with_130(how, said, tmp_path):
    import subprocess
    import sys

    (tmp_path / "ctrl_c_in_exec.py").write_text(_CTRL_C_IN_EXEC)  # run with -m, as the commands are
    src = str(Path(cli.__file__).parents[1])
    p = subprocess.run([sys.executable, "-m", "ctrl_c_in_exec", how], capture_output=True, text=True, timeout=60,
                       cwd=tmp_path, env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert (p.returncode, p.stdout, p.stderr) == (130, "", said)


@pytest.mark.parametrize("value", ["0", "0.6", "13"])
def test_the_length_penalty_type_accepts_alphas_in_range(value):
    assert _alpha_parser().parse_args(["--length-penalty", value]).length_penalty == float(value)


def test_the_length_penalty_bound_keeps_the_penalty_finite_for_5000_tokens():
    assert cli.MAX_LENGTH_PENALTY == math.floor(length_penalty_limit(4999))  # 5000 columns, <bos> first
    alpha = float(cli.MAX_LENGTH_PENALTY)
    assert torch.isfinite(gnmt_length_penalty(torch.arange(5000), alpha)).all()


@pytest.mark.parametrize("flag", ["--checkpoint-minutes"])
@pytest.mark.parametrize("value", ["inf", "nan"])
def test_train_refuses_non_finite_minutes_while_parsing(flag, value, tmp_path, capsys):
    err = command_error(train_cli.main, ["--out", str(tmp_path / "run"), flag, value], capsys)
    assert f"argument {flag}: expected a finite number > 0, got {value}" in err
    assert not (tmp_path / "run").exists()


def test_train_rejects_a_bad_device_and_unknown_arguments(tmp_path, capsys):
    err = command_error(train_cli.main, ["--out", str(tmp_path / "run"), "--device", "tpu"], capsys)
    assert err.startswith("error: device 'tpu' cannot be used here") and "available: cpu" in err
    assert not (tmp_path / "run").exists()
    err = command_error(train_cli.main, ["--out", str(tmp_path), "--colour", "red"], capsys)
    assert "unrecognized arguments: --colour red" in err
    err = command_error(train_cli.main, ["--out", str(tmp_path), "--overwrite"], capsys)
    assert "--overwrite replaces a trained run and goes with --no-resume" in err


def test_debug_shows_the_traceback(tmp_path):
    with pytest.raises(ValueError, match="unknown preset 'nope'"):
        train_cli.main(["--preset", "nope", "--out", str(tmp_path), "--debug"])


def test_aiayn_data_naming_a_file(tmp_path, monkeypatch, capsys):
    a_file = tmp_path / "train.de.gz"
    a_file.write_bytes(gzip.compress(b"Hallo\n"))
    monkeypatch.setenv("AIAYN_DATA", str(a_file))
    with pytest.raises(NotADirectoryError, match=r"AIAYN_DATA=.*train.de.gz is a file; expected the folder"):
        D.load_multi30k("val")
    err = command_error(train_cli.main, ["--preset", "multi30k-smoke", "--out", str(tmp_path / "r"), "--device", "cpu"],
                        capsys)  # fmt: skip
    assert "is a file; expected the folder that holds the six Multi30k files" in err


# --- The library ----------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.0, -1.0])
def test_fused_attention_rejects_a_temperature_that_is_not_positive(temperature):
    attn = MultiHeadAttention(16, 2, dropout=0.0, fused=True, temperature=temperature)
    x = torch.randn(1, 3, 16)
    with pytest.raises(ValueError, match=rf"temperature must be positive, got {temperature}"):
        attn(x, x, x)


@pytest.mark.parametrize("factor", [0.0, -0.5])
def test_noam_factor_must_be_positive(factor):
    message = rf"factor must be a positive number \(it scales the whole rate\), got {factor}"
    with pytest.raises(ValueError, match=message):
        noam_rate(10, 512, 4000, factor)
    model = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="factor must be a positive number"):
        noam_scheduler(make_optimizer(model), 512, 4000, factor)


@pytest.mark.parametrize("bad", [12, -1])
def test_label_smoothing_targets_out_of_range(bad):
    logits = torch.randn(2, 3, 12)
    target = torch.tensor([[1, 2, 0], [3, bad, 0]])
    message = rf"target: expected class ids in \[0, 12\) \(or ignore_index=0\), got \[{bad}\]"
    with pytest.raises(ValueError, match=message):
        LabelSmoothingLoss(0.1, ignore_index=0)(logits, target)


def test_an_eos_id_outside_the_vocabulary():
    with pytest.raises(ValueError, match=r"eos_id must be an id in \[0, vocab_size=12\), got 20"):
        copy_task_batches(1, 2, 4, 12, eos_id=20)


def test_translate_with_the_tokenizer_of_another_vocabulary(tmp_path):
    pairs = [("ein Hund", "a dog"), ("zwei Katzen", "two cats")] * 20
    tokenizer = D.train_tokenizer(pairs, 30, cache_dir=tmp_path)
    model = Transformer(TransformerConfig(50, 50, d_model=16, d_ff=32, h=2, N=1, share_embeddings=True))
    with pytest.raises(ValueError, match=r"the tokenizer has 30 ids .* but the model's vocabulary has 50"):
        translate(model, tokenizer, ["ein Hund"])


def test_fit_with_no_batches():
    model = Transformer(TransformerConfig(12, 12, d_model=16, d_ff=32, h=2, N=1))
    with pytest.raises(ValueError, match="fit: batches is empty; expected at least one Batch per epoch"):
        fit(model, [], progress=False)
    with pytest.raises(ValueError, match="fit: epoch 0 yielded no batches"):
        fit(model, lambda epoch: [], progress=False)


def test_a_damaged_tokenizer_cache_is_learned_again(tmp_path):
    pairs = [("ein Hund", "a dog"), ("zwei Katzen", "two cats")] * 20
    first = D.train_tokenizer(pairs, 30, cache_dir=tmp_path)
    good = first.model_file.read_bytes()
    first.model_file.write_bytes(good[: len(good) // 3])  # a cut-off write
    with pytest.raises(ValueError, match=rf"{first.model_file.name} is not a sentencepiece model \(damaged"):
        D.Tokenizer(first.model_file)
    again = D.train_tokenizer(pairs, 30, cache_dir=tmp_path)
    assert again.model_file == first.model_file and again.model_file.read_bytes() == good


def test_the_missing_message_lists_all_six_files(tmp_path):
    with pytest.raises(D.DatasetUnavailable) as info:
        D.load_multi30k("val", tmp_path, download=False)
    message = str(info.value)
    assert "A run needs all six: " in message
    for name in D.SHA256:
        assert f"  {name}  <-  {D.BASE_URL}{name}" in message
    assert str(tmp_path) in message and "AIAYN_DATA" in message





# --- The page's Python twin reading an export (aiayn.export.translator) --------------------------------

AGAIN = "export the run again (python -m aiayn.export)"


@pytest.fixture(scope="module")
def page_files(tmp_path_factory):
    """The JSON files of an export of the published model: tokenizer.json, translator.json and a
    shortlist.json, without the graphs (a damaged graph is tested apart)."""
    from aiayn.export.graphs import tokenizer_record
    from conftest import PUBLISHED

    folder = tmp_path_factory.mktemp("page")
    record = tokenizer_record(D.Tokenizer(PUBLISHED / "tokenizer.model"))
    (folder / "tokenizer.json").write_text(json.dumps(record), "utf-8")
    settings = {"beam": 4, "length_penalty": 0.6, "max_len_a": 1.0, "max_len_b": 50, "max_len": 256}
    (folder / "translator.json").write_text(json.dumps(settings))
    return folder


def _copy_with(folder: Path, tmp_path: Path, name: str, data: bytes) -> Path:
    out = tmp_path / "export"
    shutil.copytree(folder, out)
    (out / name).write_bytes(data)
    return out


@pytest.mark.parametrize("name", ["tokenizer.json", "translator.json"])
def test_a_damaged_json_file_of_an_export_is_refused_by_name(page_files, tmp_path, name):
    whole = (page_files / name).read_bytes()
    folder = _copy_with(page_files, tmp_path, name, whole[: len(whole) // 2])  # a cut-off copy
    pair = [("Ein Hund.", "A dog.")]
    with pytest.raises(ValueError) as refused:
        tr.Vocabulary.load(folder) if name == "tokenizer.json" else scores.score_files(folder, pair)
    message = str(refused.value)
    assert message.startswith(f"{folder / name} cannot be read as JSON (")
    assert message.endswith(f"): it is truncated or damaged; {AGAIN}")


def test_a_tokenizer_json_without_its_fields_is_refused_by_name(page_files, tmp_path):
    folder = _copy_with(page_files, tmp_path, "tokenizer.json", b'{"pieces": []}')
    with pytest.raises(ValueError) as refused:
        tr.Vocabulary.load(folder)
    assert str(refused.value) == (
        f"{folder / 'tokenizer.json'} is not a tokenizer record of aiayn.export.graphs: expected pieces, types, "
        f"pad_id, bos_id, eos_id, unk_id and add_dummy_prefix (no 'types'); {AGAIN}"
    )


def test_a_damaged_graph_is_refused_by_name(page_files, tmp_path):
    folder = _copy_with(page_files, tmp_path, "encoder.int8.onnx", b"\x08\x07not a protobuf at all" * 10)
    with pytest.raises(ValueError) as refused:
        tr.OnnxModel(folder)
    message = str(refused.value)
    assert message.startswith(f"{folder / 'encoder.int8.onnx'} cannot be read as an ONNX graph (")
    assert message.endswith(f"): it is truncated or damaged; {AGAIN}")


@pytest.mark.parametrize(
    ("record", "why"),
    [
        ({"frequent": [-1, 5], "pieces": {}}, "frequent holds [-1]: expected token ids in [0, 8000)"),
        ({"frequent": [5], "pieces": {"27": [9, -3]}}, "pieces['27'] holds [-3]: expected token ids in [0, 8000)"),
        ({"frequent": [8000], "pieces": {}}, "frequent holds [8000]: expected token ids in [0, 8000)"),
        ({"frequent": [], "pieces": {}}, "the shortlist is empty: it offers no id besides <eos>, so every "
                                          "translation would be ''"),
        ({"frequent": [2], "pieces": {"27": []}}, "the shortlist is empty: it offers no id besides <eos>, so "
                                                  "every translation would be ''"),
    ],
)  # fmt: skip
def test_a_shortlist_with_ids_outside_the_vocabulary_or_none_is_refused_by_name(page_files, tmp_path, record, why):
    data = json.dumps({"format": "aiayn-shortlist/1", "top": 30, **record}).encode()
    folder = _copy_with(page_files, tmp_path, "shortlist.json", data)
    with pytest.raises(ValueError) as refused:
        tr.load_shortlist(folder)
    assert str(refused.value) == f"{folder / 'shortlist.json'}: {why}; {AGAIN}"


def test_the_ids_a_step_scores_must_be_the_vocabulary_s_and_more_than_eos(page_files):
    vocab = tr.Vocabulary.load(page_files)
    with pytest.raises(ValueError, match=r"^targets: expected token ids in \[0, 8000\), got \[-1\]$"):
        tr.scored(vocab, [-1, 5, 9])
    with pytest.raises(ValueError, match=r"^targets: expected some id besides <eos> \(2\), got \[2\]: the short"):
        tr.scored(vocab, [2])
    with pytest.raises(ValueError, match=r"^targets: expected some id besides <eos> \(2\), got \[\]"):
        tr.scored(vocab, [])
    assert tr.scored(vocab, [2, 5]).tolist() == [2, 5]


def test_the_page_s_search_refuses_a_negative_or_empty_shortlist_instead_of_translating(exported):
    """On the exported graphs: a negative id would be scored as the id counted from the end of the
    vocabulary, and an empty shortlist would translate every sentence to ''."""
    model, vocab = tr.OnnxModel(exported), tr.Vocabulary.load(exported)
    settings = json.loads((exported / "translator.json").read_text())
    good = json.loads((exported / "shortlist.json").read_text())
    sentence = ["Ein Hund läuft auf der Wiese."]
    assert tr.translate(model, vocab, sentence, settings, beam=1, shortlist=good)[0]
    negative = good | {"frequent": [-1, *good["frequent"]]}
    with pytest.raises(ValueError, match=r"^targets: expected token ids in \[0, 8000\), got \[-1\]"):
        tr.translate(model, vocab, sentence, settings, beam=1, shortlist=negative)
    empty = good | {"frequent": [], "pieces": {}}
    for beam in (1, 4):
        with pytest.raises(ValueError, match=r"^targets: expected some id besides <eos> \(2\), got \[2\]"):
            tr.translate(model, vocab, sentence, settings, beam=beam, shortlist=empty)
