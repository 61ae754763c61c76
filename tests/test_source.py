"""aiayn.source: the package's code shown on the page is the installed code, without its docstring, and fits."""

import pytest

from aiayn import source
from aiayn.source import SourceBlock, show_source, source_of


def _short(x, y):
    """A docstring that the page does not show.

    It spans lines.
    """
    return x + y  # the body stays


def _module_function():
    return 2


def test_source_drops_the_docstring_and_keeps_the_body(monkeypatch):
    monkeypatch.setattr(_short, "__module__", "aiayn.fake")
    code = source_of(_short)
    assert "docstring" not in code and "spans" not in code
    assert code.splitlines() == ["def _short(x, y):", "    return x + y  # the body stays"]


def test_source_keeps_the_docstring_on_request(monkeypatch):
    monkeypatch.setattr(_short, "__module__", "aiayn.fake")
    assert "It spans lines." in source_of(_short, docstring=True)


def test_class_source_drops_a_one_line_docstring_after_a_decorator():
    lines = source_of(SourceBlock).splitlines()
    assert lines[:4] == ["@dataclass(frozen=True)", "class SourceBlock:", "", "    name: str"]


def test_block_renders_as_highlighted_python_naming_the_object():
    block = show_source(source.source_of)
    markdown = block._repr_markdown_()
    assert markdown.startswith("`aiayn.source.source_of`, from `aiayn/source.py`:")
    assert "```python\ndef source_of(" in markdown
    assert isinstance(block, SourceBlock) and block.code == source_of(source.source_of)


def test_objects_outside_the_package_are_refused():
    with pytest.raises(TypeError, match="expected a function, class or method of the aiayn package"):
        show_source(_module_function)


def test_lines_wider_than_the_code_box_are_refused(monkeypatch):
    def wide():
        return "................................................................................"

    monkeypatch.setattr(wide, "__module__", "aiayn.fake")
    with pytest.raises(ValueError, match=r"lines must fit 77 characters.*line 2 \(93 chars\)"):
        show_source(wide)
