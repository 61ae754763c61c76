"""What a careless user finds (issue 34), each on real processes: commands run as subprocesses.

Two evaluations racing into one folder, files that are not what their name says, sentences of
invisible characters, a disk that fills while a file is written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_runs import TINY, copy_run

from aiayn.bleu import corpus_bleu
from aiayn.data import load_multi30k
from aiayn.recipes import train
from aiayn.runs import RunFolder
from aiayn.translation import evaluate, is_blank, source_ids, translate

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parents[1]


def env(cache: Path) -> dict[str, str]:
    """A child's environment: this package, one thread, the test's tokenizer cache."""
    return {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1",
            "XDG_CACHE_HOME": str(cache)}  # fmt: skip


def one_error(done: subprocess.CompletedProcess | tuple[int, str], *words: str) -> str:
    """One ``error:`` line, no traceback, status 2, saying ``words``; returns the line."""
    code, err = (done.returncode, done.stderr) if isinstance(done, subprocess.CompletedProcess) else done
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err
    return err


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, root, cache) -> tuple[Path, Path]:
    """Two tiny runs of one epoch, of other seeds: their translations differ."""
    folder = tmp_path_factory.mktemp("two")
    runs = folder / "a", folder / "b"
    for seed, run in enumerate(runs):
        train(TINY.with_changes(epochs=1, seed=seed), run, root=root, device="cpu", progress=False)
    return runs


# --- A. Two evaluations into one folder at once ----------------------------------------------------

LIMIT = 60  # sentences: decoding them takes far longer than the two processes' start differs
# The child imports everything, says it is ready, and waits for the word to go: the two start
# decoding within milliseconds, so both pass the checks made before decoding.
AT_ONCE = """
import sys, time
from pathlib import Path
import aiayn.evaluate
ready, go = Path(sys.argv[1]), Path(sys.argv[2])
ready.touch()
while not go.exists():
    time.sleep(0.002)
aiayn.evaluate.main(sys.argv[3:])
"""


def at_once(commands: list[list[str]], folder: Path, environ: dict) -> list[subprocess.CompletedProcess]:
    """Run ``python -m aiayn.evaluate`` with each list of arguments, all starting at once."""
    go = folder / "go"
    processes = []
    for i, argv in enumerate(commands):
        ready = folder / f"ready-{i}"
        processes.append((ready, subprocess.Popen(
            [sys.executable, "-c", AT_ONCE, str(ready), str(go), *argv],
            env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )))  # fmt: skip
    for ready, p in processes:
        while not ready.exists():
            assert p.poll() is None, p.communicate()
    go.touch()
    done = []
    for _, p in processes:
        out, err = p.communicate(timeout=300)
        done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return done


def scored(stdout: str) -> float:
    """Our BLEU as the command printed it."""
    line = next(line for line in stdout.splitlines() if line.startswith("our BLEU:"))
    return float(line.split()[2])


def check_listed(folder: Path) -> dict:
    """Every file the manifest lists is there, as written; returns the manifest."""
    run = RunFolder(folder)
    for name in run.manifest()["files"]:
        run.read_verified(name)
    assert run.manifest()["pending"] == {}
    return run.manifest()


def test_two_runs_evaluated_into_one_new_folder_at_once_never_mix(two_runs, tmp_path, root, cache):
    out = tmp_path / "scores"
    commands = [[str(run), "--out", str(out), "--device", "cpu", "--data", str(root), "--limit", str(LIMIT)]
                for run in two_runs]  # the same setting: one entry, one translations file  # fmt: skip
    done = at_once(commands, tmp_path, env(cache))
    won = [i for i, d in enumerate(done) if d.returncode == 0]
    assert len(won) == 1, [d.stderr for d in done]
    winner, loser = done[won[0]], done[1 - won[0]]
    winner_run = two_runs[won[0]]
    # found under the lock when saving: "(another command wrote there while this one decoded; nothing
    # was saved)"; or, if the winner saved before the loser even started, before decoding
    one_error(loser, f"--out {out} holds the results of another run (")
    assert "saved as" in winner.stdout and "saved as" not in loser.stdout
    # the folder holds the winner's results alone, labelled as the winner's
    manifest = check_listed(out)
    assert manifest["results_of"] == RunFolder(winner_run).run_id()
    results = json.loads((out / "results.json").read_text())
    (setting,) = results
    assert f"saved as {setting!r}" in winner.stdout
    assert results[setting]["bleu"] == pytest.approx(scored(winner.stdout), abs=0.005)
    hypotheses = (out / results[setting]["hypotheses_file"]).read_text().splitlines()
    references = [en for _, en in load_multi30k("test2016", root)[:LIMIT]]
    assert corpus_bleu(hypotheses, references).score == pytest.approx(scored(winner.stdout), abs=0.005)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [".lock", "manifest.json", "results.json", results[setting]["hypotheses_file"]]
    )


def test_one_run_evaluated_twice_at_once_keeps_both_settings(two_runs, tmp_path, root, cache):
    run = copy_run(two_runs[0], tmp_path / "run")
    evaluate(run, device="cpu", root=root)  # results.json holds the run's own setting
    commands = [[str(run), "--device", "cpu", "--data", str(root), "--limit", str(LIMIT), "--beam", beam]
                for beam in ("1", "2")]  # fmt: skip
    done = at_once(commands, tmp_path, env(cache))
    assert [d.returncode for d in done] == [0, 0], [d.stderr for d in done]
    manifest = check_listed(run)
    results = json.loads((run / "results.json").read_text())
    assert len(results) == 3 and "test2016" in results
    for d in done:
        (setting,) = (s for s in results if f"saved as {s!r}" in d.stdout)
        assert results[setting]["bleu"] == pytest.approx(scored(d.stdout), abs=0.005)
        assert results[setting]["hypotheses_file"] in manifest["files"]


# --- C. Sentences of invisible characters are blank ------------------------------------------------

# whitespace to str.isspace (non-breaking, ideographic, narrow no-break space, line separator) and
# the zero-width characters: none of them is anything to translate
INVISIBLE = ["", " ", "\t\n", "\u00a0", "\u00a0 \u00a0", "\u3000", "\u202f", "\u2028", "\u200b", "\u200c\u200d",
             "\u2060", "\ufeff", " \u200b\u00a0\t"]  # fmt: skip


def test_whitespace_and_zero_width_characters_alone_are_blank():
    assert all(is_blank(s) for s in INVISIBLE)
    assert not any(is_blank(s) for s in ["a", "\u00a0a\u00a0", "\u200bx", ".", "\U0001f600", "\u2047"])


def test_a_sentence_of_invisible_characters_translates_to_nothing(published):
    model, tokenizer = published  # for "\u00a0" it invented "There are a three people on a mill."
    got = translate(model, tokenizer, ["Ein Hund.", *INVISIBLE, "Zwei Männer."], beam=1)
    assert got[1:-1] == [""] * len(INVISIBLE)
    assert got[0] and got[-1]
    assert source_ids(tokenizer, INVISIBLE, model.config.max_len) == [None] * len(INVISIBLE)
