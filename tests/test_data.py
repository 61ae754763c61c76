"""aiayn.data (multi30k, tokenizer): checked Multi30k files, offline and download paths, the sentencepiece tokenizer,
token-budget batches."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import warnings
from pathlib import Path

import pytest
import torch

from aiayn.data import download
from aiayn.data import multi30k as D
from aiayn.data import tokenizer as T
from aiayn.masks import shift_right
from aiayn.runs import published as P

REPO = Path(__file__).resolve().parents[1]

SIZES = {"train": 29000, "val": 1014, "test2016": 1000}


def _data_dir() -> Path:
    """``$AIAYN_DATA``, else ``shared/data/multi30k`` next to the repository."""
    if os.environ.get("AIAYN_DATA"):
        return Path(os.environ["AIAYN_DATA"])
    return Path(__file__).resolve().parents[1].parent / "shared/data/multi30k"


@pytest.fixture(scope="session")
def root() -> Path:
    path = _data_dir()
    missing = [name for name in D.SHA256 if not (path / name).is_file()]
    if missing:
        pytest.fail(
            f"Multi30k files {missing} are missing from {path}. Set AIAYN_DATA to a folder holding them "
            f"(download from {D.BASE_URL}<file>)."
        )
    return path


@pytest.fixture(scope="session")
def train_pairs(root):
    return D.load_multi30k("train", root, download=False)


@pytest.fixture(scope="session")
def tok_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tokenizers")


@pytest.fixture(scope="session")
def tok(train_pairs, tok_dir):
    return T.train_tokenizer(train_pairs, cache_dir=tok_dir)


@pytest.fixture(scope="session")
def encoded(tok, train_pairs):
    return D.encode_pairs(tok, train_pairs)


def _copy(root: Path, dest: Path, *names: str) -> None:
    for name in names:
        shutil.copyfile(root / name, dest / name)


def _serve_from(root: Path, log: list[str]):
    """A fake downloader that answers each URL with the bytes of the local copy."""

    def downloader(url: str, deadline: float) -> list[bytes]:
        log.append(url)
        return [(root / url.rsplit("/", 1)[-1]).read_bytes()]

    return downloader


# --- loading -----------------------------------------------------------------------------------


@pytest.mark.parametrize("split", list(SIZES))
def test_split_sizes(root, split):
    pairs = D.load_multi30k(split, root, download=False)
    assert len(pairs) == SIZES[split]
    assert all(isinstance(s, str) and isinstance(t, str) for s, t in pairs)


def test_lines_keep_their_text(root, train_pairs):
    assert train_pairs[0] == (
        "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
        "Two young, White males are outside near many bushes.",
    )
    raw = gzip.decompress((root / "train.de.gz").read_bytes()).decode("utf-8")
    assert "\n".join(s for s, _ in train_pairs) + "\n" == raw  # only the newlines are gone


def test_languages_swap(root):
    de_en = D.load_multi30k("val", root, download=False)
    en_de = D.load_multi30k("val", root, src_lang="en", tgt_lang="de", download=False)
    assert en_de == [(t, s) for s, t in de_en]


def test_bad_split(root):
    with pytest.raises(ValueError, match=r"split must be one of \['test2016', 'train', 'val'\], got 'test'"):
        D.load_multi30k("test", root)


def test_bad_language(root):
    with pytest.raises(ValueError, match=r"tgt_lang must be one of \['de', 'en'\], got 'fr'"):
        D.load_multi30k("val", root, tgt_lang="fr")


def test_same_language(root):
    with pytest.raises(ValueError, match="src_lang and tgt_lang must differ, got 'de' for both"):
        D.load_multi30k("val", root, src_lang="de", tgt_lang="de")


def test_data_dir_order(tmp_path, monkeypatch):
    monkeypatch.setenv("AIAYN_DATA", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert D.data_dir(tmp_path / "arg") == tmp_path / "arg"
    assert D.data_dir() == tmp_path / "env"
    monkeypatch.delenv("AIAYN_DATA")
    assert D.data_dir() == tmp_path / "xdg" / "aiayn" / "multi30k"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert D.data_dir() == tmp_path / "home" / ".cache" / "aiayn" / "multi30k"


def test_corrupt_file_is_refused(root, tmp_path):
    _copy(root, tmp_path, "val.de.gz", "val.en.gz")
    assert len(D.load_multi30k("val", tmp_path, download=False)) == 1014  # its hash is now cached
    path = tmp_path / "val.de.gz"
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))
    actual = hashlib.sha256(bytes(data)).hexdigest()
    with pytest.raises(D.ChecksumError) as err:
        D.load_multi30k("val", tmp_path, downloader=_serve_from(root, []))
    msg = str(err.value)
    assert str(path) in msg and actual in msg and D.SHA256["val.de.gz"] in msg


def test_hashes_are_cached(root, tmp_path, monkeypatch):
    _copy(root, tmp_path, "val.de.gz", "val.en.gz")
    D.load_multi30k("val", tmp_path, download=False)
    calls = []
    real = download.sha256_file
    monkeypatch.setattr(download, "sha256_file", lambda *a: calls.append(a) or real(*a))
    D.load_multi30k("val", tmp_path, download=False)
    assert calls == []


def test_offline_error_names_files_and_folder(tmp_path):
    def offline(url: str, deadline: float) -> list[bytes]:
        raise urllib.error.URLError("no network")

    with pytest.raises(D.DatasetUnavailable) as err:
        D.load_multi30k("test2016", tmp_path / "empty", downloader=offline)
    msg = str(err.value)
    for name in ("test_2016_flickr.de.gz", "test_2016_flickr.en.gz"):
        assert name in msg and D.BASE_URL + name in msg
    assert str(tmp_path / "empty") in msg and "AIAYN_DATA" in msg and "no network" in msg


def test_no_download_error(tmp_path):
    def never(url: str, deadline: float) -> list[bytes]:
        raise AssertionError("must not download")

    with pytest.raises(D.DatasetUnavailable, match=r"val\.en\.gz"):
        D.load_multi30k("val", tmp_path, download=False, downloader=never)


def test_download_is_verified_and_atomic(root, tmp_path, monkeypatch):
    renames = []
    real_replace = os.replace

    def spy(src, dst):
        src, dst = Path(src), Path(dst)
        renames.append((src.parent, dst.name, hashlib.sha256(src.read_bytes()).hexdigest()))
        assert not dst.exists()  # the real name appears only through the rename
        real_replace(src, dst)

    monkeypatch.setattr(D.os, "replace", spy)
    urls: list[str] = []
    target = tmp_path / "cache" / "multi30k"
    pairs = D.load_multi30k("val", target, downloader=_serve_from(root, urls))
    assert len(pairs) == 1014
    assert urls == [D.BASE_URL + "val.de.gz", D.BASE_URL + "val.en.gz"]
    assert renames == [(target, name, D.SHA256[name]) for name in ("val.de.gz", "val.en.gz")]
    assert sorted(p.name for p in target.iterdir()) == ["val.de.gz", "val.en.gz"]  # no temp files left
    urls.clear()
    D.load_multi30k("val", target, downloader=_serve_from(root, urls))
    assert urls == []  # present files are not fetched again


def test_bad_download_writes_nothing(root, tmp_path):
    expected = rf"downloaded .*val\.de\.gz has SHA-256 [0-9a-f]{{64}}, expected {D.SHA256['val.de.gz']}"
    with pytest.raises(D.ChecksumError, match=expected):
        D.load_multi30k("val", tmp_path, downloader=lambda url, deadline: [b"<html>rate limited</html>"])
    assert list(tmp_path.iterdir()) == []


def test_misaligned_files(tmp_path, monkeypatch):
    for lang, text in (("de", "a\nb\nc\n"), ("en", "a\nb\n")):
        data = gzip.compress(text.encode())
        (tmp_path / f"val.{lang}.gz").write_bytes(data)
        monkeypatch.setitem(D.SHA256, f"val.{lang}.gz", hashlib.sha256(data).hexdigest())
    with pytest.raises(ValueError, match="val.de.gz has 3 lines but val.en.gz has 2"):
        D.load_multi30k("val", tmp_path, download=False)


def test_a_file_given_as_the_data_folder_is_named_as_such(tmp_path, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("not a folder\n")
    monkeypatch.delenv("AIAYN_DATA", raising=False)
    with pytest.raises(NotADirectoryError) as err:
        D.load_multi30k("val", afile)
    msg = str(err.value)
    assert msg.startswith(f"the Multi30k folder {afile} is a file; expected the folder that holds the six")
    assert msg.endswith("train.en.gz, val.de.gz, val.en.gz): give --data (root= in Python) that folder")
    assert "root=" + str(afile) not in msg
    monkeypatch.setenv("AIAYN_DATA", str(afile))
    with pytest.raises(NotADirectoryError, match=r"folder \$AIAYN_DATA=.*: set \$AIAYN_DATA to that folder$"):
        D.load_multi30k("val")


def test_the_train_command_names_a_file_given_as_data(tmp_path):
    afile, out = tmp_path / "afile", tmp_path / "out"
    afile.write_text("not a folder\n")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("AIAYN_DATA", None)
    argv = [sys.executable, "-m", "aiayn.train", "--preset", "multi30k-smoke", "--out", str(out),
            "--data", str(afile), "--device", "cpu", "--no-progress"]  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(
        f"error: the Multi30k folder {afile} is a file; expected the folder"
    ), done.stderr
    assert done.stderr.endswith(": give --data (root= in Python) that folder\n")
    assert not out.exists()


class Trickle(http.server.BaseHTTPRequestHandler):
    """Sends its headers, then one byte every half second, and never finishes."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        for _ in range(1000):
            if self.server.stop.wait(0.5):
                return
            try:
                self.wfile.write(b"x")
                self.wfile.flush()
            except OSError:  # the client hung up
                return

    def log_message(self, *args):
        pass


@pytest.fixture
def trickle():
    """The URL of a local server that trickles a byte every 0.5 s."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    server.daemon_threads = True
    server.stop = threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.stop.set()
    server.shutdown()
    server.server_close()


def test_a_trickling_download_of_multi30k_stops_at_its_deadline(trickle, tmp_path, monkeypatch):
    monkeypatch.setattr(D, "BASE_URL", trickle)
    start = time.monotonic()
    with pytest.raises(D.DatasetUnavailable) as err:
        D.load_multi30k("val", tmp_path, deadline_s=2.0)
    assert time.monotonic() - start < 3.0
    assert f"downloading {trickle}val.de.gz took over 2 s and ran past its deadline" in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_a_trickling_download_of_the_model_stops_at_its_deadline(trickle, tmp_path, monkeypatch):
    monkeypatch.setattr(P, "RELEASE_URL", trickle)
    start = time.monotonic()
    with pytest.raises(P.ModelUnavailable) as err:
        P.fetch_published(tmp_path, deadline_s=2.0)
    assert time.monotonic() - start < 3.0
    assert f"downloading {trickle}config.json took over 2 s and ran past its deadline" in str(err.value)
    assert list(tmp_path.iterdir()) == []  # no partial file, no temporary one


def test_downloaded_files_get_the_mode_open_gives(root, tmp_path):
    umask = os.umask(0o022)
    os.umask(umask)
    D.load_multi30k("val", tmp_path, downloader=_serve_from(root, []))
    for name in ("val.de.gz", "val.en.gz"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~umask


# --- tokenizer ---------------------------------------------------------------------------------


def test_special_ids(tok):
    assert (T.PAD, T.BOS, T.EOS, T.UNK) == (0, 1, 2, 3)
    assert (D.PAD, D.BOS, D.EOS, D.UNK, D.Tokenizer, D.train_tokenizer) == (
        T.PAD, T.BOS, T.EOS, T.UNK, T.Tokenizer, T.train_tokenizer)  # the pipeline's step 2, in data too
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    assert [tok.id_to_piece(i) for i in range(4)] == ["<pad>", "<s>", "</s>", "<unk>"]
    assert tok.vocab_size == len(tok) == T.DEFAULT_VOCAB_SIZE == 8000


def test_encode_decode(tok):
    ids = tok.encode("Ein Hund läuft.", add_bos=True, add_eos=True)
    assert ids[0] == T.BOS and ids[-1] == T.EOS and T.UNK not in ids
    assert tok.decode([T.PAD, *ids, T.PAD]) == "Ein Hund läuft."
    assert tok.decode(torch.tensor(ids)) == "Ein Hund läuft."
    assert tok.pieces("Ein Hund läuft.") == ["▁Ein", "▁Hund", "▁läuft", "."]
    assert tok.encode_batch(["Ein Hund.", "A dog."]) == [tok.encode("Ein Hund."), tok.encode("A dog.")]
    assert tok.decode_batch(torch.tensor([tok.encode("A dog.") + [T.EOS, T.PAD]])) == ["A dog."]


@pytest.mark.parametrize("lang", ["de", "en"])
def test_round_trip_test2016(root, tok, lang):
    pairs = D.load_multi30k("test2016", root, download=False)
    sentences = [s if lang == "de" else t for s, t in pairs]
    decoded = [tok.decode(ids) for ids in tok.encode_batch(sentences)]
    assert decoded == sentences
    assert not any(T.UNK in ids for ids in tok.encode_batch(sentences))


def test_round_trip_odd_whitespace(tok):
    text = "  Zwei  Männer\tspielen \u00a0Fußball. "
    assert tok.decode(tok.encode(text)) == text


def test_tokenizer_cache_hit(train_pairs, tok, tok_dir, monkeypatch):
    mtime = tok.model_file.stat().st_mtime_ns

    def no_training(*args, **kwargs):
        raise AssertionError("the cached model should have been loaded")

    spm = T._spm()
    monkeypatch.setattr(spm.SentencePieceTrainer, "train", no_training)
    start = time.perf_counter()
    again = T.train_tokenizer(train_pairs, cache_dir=tok_dir)
    assert time.perf_counter() - start < 1.0
    assert again.model_file == tok.model_file and tok.model_file.stat().st_mtime_ns == mtime
    sums = tok.model_file.with_name(tok.model_file.name + ".sha256")
    assert sorted(tok_dir.iterdir()) == [tok.model_file, sums]
    digest = hashlib.sha256(tok.model_file.read_bytes()).hexdigest()
    assert sums.read_text() == f"{digest}  {tok.model_file.name}\n"


def test_tokenizer_deterministic_and_keyed(train_pairs, tok, tmp_path):
    again = T.train_tokenizer(train_pairs, cache_dir=tmp_path)
    assert again.model_file.name == tok.model_file.name
    assert again.model_file.read_bytes() == tok.model_file.read_bytes()
    small = T.train_tokenizer(train_pairs[:2000], vocab_size=1000, cache_dir=tmp_path)
    unigram = T.train_tokenizer(train_pairs[:2000], vocab_size=1000, cache_dir=tmp_path, model_type="unigram")
    assert small.vocab_size == unigram.vocab_size == 1000
    assert len({again.model_file, small.model_file, unigram.model_file}) == 3


def test_tokenizer_bad_inputs(tok, train_pairs, tmp_path):
    with pytest.raises(TypeError, match="text: expected a str, got list"):
        tok.encode(["a"])
    with pytest.raises(ValueError, match=r"ids must be in \[0, 8000\), got \[8000\]"):
        tok.decode([5, 8000])
    with pytest.raises(ValueError, match="model_type must be 'bpe' or 'unigram', got 'wordpiece'"):
        T.train_tokenizer(train_pairs, cache_dir=tmp_path, model_type="wordpiece")
    with pytest.raises(ValueError, match="vocab_size must be an integer >= 8, got 0"):
        T.train_tokenizer(train_pairs, vocab_size=0, cache_dir=tmp_path)


def test_a_lone_surrogate_is_refused_by_position(tok):
    with pytest.raises(ValueError, match=r"^text: character 8 \('\\ud800'\) is not valid Unicode text"):
        tok.encode("Ein Hund\ud800")
    with pytest.raises(ValueError, match=r"^texts\[1\]: character 4 \('\\udcff'\) is not valid Unicode text"):
        tok.encode_batch(["Ein Hund.", "Zwei\udcff Katzen."])
    assert tok.encode_batch(["Ein Hund.", "Zwei Katzen."]) == [tok.encode("Ein Hund."), tok.encode("Zwei Katzen.")]


@pytest.fixture
def small_cache(train_pairs, tmp_path):
    """A 300-piece tokenizer of 400 pairs, cached in a folder of its own."""
    return T.train_tokenizer(train_pairs[:400], 300, cache_dir=tmp_path), train_pairs[:400], tmp_path


def _cut_that_parses(data: bytes, start: int) -> int:
    """The first length >= ``start`` at which ``data`` cut off still loads as a (smaller) model."""
    import sentencepiece

    for n in range(start, len(data)):
        try:
            sentencepiece.SentencePieceProcessor(model_proto=data[:n])
        except RuntimeError:
            continue
        return n
    raise AssertionError("no cut parses")


@pytest.mark.parametrize("cut", ["500 bytes", "a cut that parses"])
def test_a_cut_cached_tokenizer_is_learned_again(small_cache, cut):
    first, pairs, cache = small_cache
    good = first.model_file.read_bytes()
    n = 500 if cut == "500 bytes" else _cut_that_parses(good, 500)
    first.model_file.write_bytes(good[:n])
    if cut != "500 bytes":
        assert T.Tokenizer(first.model_file).vocab_size < 300  # the damage this guards against
    with pytest.warns(UserWarning, match=rf"the cached tokenizer {first.model_file} has SHA-256 .*: learning it"):
        again = T.train_tokenizer(pairs, 300, cache_dir=cache)
    assert again.vocab_size == 300 and again.model_file.read_bytes() == good
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert T.train_tokenizer(pairs, 300, cache_dir=cache).vocab_size == 300  # cached again, quietly


def test_a_tokenizer_cached_before_sums_is_kept_by_its_size_and_gets_its_sum(small_cache):
    first, pairs, cache = small_cache
    sums = first.model_file.with_name(first.model_file.name + ".sha256")
    kept = sums.read_text()
    sums.unlink()  # as an older version cached it
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: nothing is wrong with it
        again = T.train_tokenizer(pairs, 300, cache_dir=cache)
    assert again.vocab_size == 300 and sums.read_text() == kept


def test_cached_tokenizer_files_get_the_mode_open_gives(small_cache):
    first, _, cache = small_cache
    umask = os.umask(0o022)
    os.umask(umask)
    assert sorted(p.stat().st_mode & 0o777 for p in cache.iterdir()) == [0o666 & ~umask] * 2


# --- batching ----------------------------------------------------------------------------------


@pytest.mark.parametrize("max_tokens", [4096, 8192])
def test_batches_cover_every_pair_within_budget(encoded, max_tokens):
    lengths = D.pair_lengths(encoded)
    batches = D.make_batches(encoded, max_tokens, seed=1, epoch=3)
    assert sorted(i for b in batches for i in b) == list(range(len(encoded)))
    for b in batches:
        assert len(b) * (max(lengths[i][0] for i in b) + max(lengths[i][1] for i in b)) <= max_tokens


def test_oversized_pair_gets_its_own_batch():
    pairs = [([5] * 3, [5] * 3), ([5] * 50, [5] * 50), ([5] * 4, [5] * 2)]
    batches = D.make_batches(pairs, max_tokens=20, shuffle=False)
    assert [1] in batches
    assert sorted(i for b in batches for i in b) == [0, 1, 2]


def test_epochs_differ_and_repeat(encoded):
    e0 = D.make_batches(encoded, 4096, seed=0, epoch=0)
    e1 = D.make_batches(encoded, 4096, seed=0, epoch=1)
    assert e0 != e1 and {tuple(b) for b in e0} != {tuple(b) for b in e1}  # other order, other groups
    assert e0 == D.make_batches(encoded, 4096, seed=0, epoch=0)
    assert D.make_batches(encoded, 4096, shuffle=False) == D.make_batches(encoded, 4096, shuffle=False, epoch=5)


@pytest.mark.parametrize("max_tokens", [4096, 8192])
def test_bucketing_beats_random_batching(encoded, max_tokens):
    lengths = D.pair_lengths(encoded)
    bucketed = D.padding_fraction(D.make_batches(encoded, max_tokens), lengths)
    random_ = D.padding_fraction(D.make_batches(encoded, max_tokens, sort=False), lengths)
    assert bucketed < 0.08 and random_ > 0.4


def test_padding_fraction_by_hand():
    lengths = [(2, 3), (4, 1)]  # padded: 2 * (4 + 3) = 14 positions, 10 real
    assert D.padding_fraction([[0, 1]], lengths) == pytest.approx(1 - 10 / 14)


def test_bad_budget(encoded):
    with pytest.raises(ValueError, match="max_tokens must be a positive integer, got 0"):
        D.make_batches(encoded, 0)


def test_collate():
    src, tgt = D.collate([([5, 6, 7], [8]), ([9], [10, 11])])
    assert src.dtype == tgt.dtype == torch.long
    assert src.tolist() == [[5, 6, 7, D.EOS], [9, D.EOS, D.PAD, D.PAD]]  # (B, S)
    assert tgt.tolist() == [[8, D.EOS, D.PAD], [10, 11, D.EOS]]  # (B, T)
    assert shift_right(tgt, D.BOS).tolist() == [[D.BOS, 8, D.EOS], [D.BOS, 10, 11]]


def test_collate_empty():
    with pytest.raises(ValueError, match="got an empty batch"):
        D.collate([])
