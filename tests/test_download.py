"""aiayn.data.download: one downloader and one ChecksumError for Multi30k and the published model; no network."""

from __future__ import annotations

import hashlib
import time

import pytest

from aiayn.data import download
from aiayn.data import multi30k as data
from aiayn.runs import published


class Trickle:
    """A response that sends a byte every few milliseconds and never stops."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def read(self, n):
        time.sleep(0.005)
        return b"x"


def test_the_whole_download_has_a_deadline(monkeypatch):
    monkeypatch.setattr(download.urllib.request, "urlopen", lambda url, timeout: Trickle())
    with pytest.raises(TimeoutError, match=r"downloading https://example.org/f took over 0 s"):
        b"".join(download.urlopen_pieces("https://example.org/f", time.monotonic() + 0.05))


def test_data_and_the_published_model_share_one_checksum_error():
    assert data.ChecksumError is published.ChecksumError is download.ChecksumError


def test_a_download_is_renamed_into_place_only_when_its_sum_is_right(tmp_path):
    body = b"the right bytes"
    path = tmp_path / "folder" / "f.txt"
    pieces = lambda url, deadline: [body[:4], body[4:]]  # noqa: E731
    with pytest.raises(download.ChecksumError, match=r"downloaded https://example.org/f.txt has SHA-256"):
        download.download_file("https://example.org/f.txt", path, "0" * 64, time.monotonic() + 5, pieces)
    assert list(path.parent.iterdir()) == []  # no file, no temporary one
    digest = hashlib.sha256(body).hexdigest()
    download.download_file("https://example.org/f.txt", path, digest, time.monotonic() + 5, pieces)
    assert path.read_bytes() == body
    download.check_file(path, digest, "")
    with pytest.raises(download.ChecksumError, match=rf"{path} has SHA-256 {digest}, expected 0+\. Fix it\.$"):
        download.check_file(path, "0" * 64, "Fix it.")


def test_the_cache_honours_xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert download.user_cache_dir("models", "m") == tmp_path / "xdg" / "aiayn" / "models" / "m"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert download.user_cache_dir("multi30k") == tmp_path / "home" / ".cache" / "aiayn" / "multi30k"
