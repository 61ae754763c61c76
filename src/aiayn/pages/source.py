"""Show the package's own code on the page: the source of a function, class or method, as it is installed.

A chapter calls ``show_source(MultiHeadAttention.forward)``; the notebook stores the code as a highlighted
Markdown block, so the website shows exactly what ``aiayn`` runs. ``show_js("beamSearch")`` does the same for
a function of the JavaScript the website runs (``aiayn/web/translator.mjs``, the twin of ``aiayn.export.translator``).
nbval re-runs the cell, and a test in ``tests/test_book.py`` re-reads every shown block, so a block that no
longer matches the package fails.

A line wider than the code box (``WIDTH``) is wrapped for display (``wrap_code``), and in Python only where
Python allows a line break, so that the copied listing is the same code (``tests/test_source.py`` parses
both): code is cut at a space between tokens and marked with a ``\\`` (Python's own line continuation), a
string is cut into two literals that Python joins again (``"a b"`` as ``"a " \\`` and ``"b"``), never
inside an f-string's ``{...}``, and a comment goes on as a comment. The piece below is indented four more
spaces. Code that fits is shown as it is.
"""

from __future__ import annotations

import inspect
import io
import re
import textwrap
import tokenize
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "SourceBlock",
    "show_source",
    "source_of",
    "show_js",
    "translator_page",
    "bleu_page",
    "js_source_of",
    "wrap_code",
    "WIDTH",
]

WIDTH = 77
"""The widest line a code box on the website holds at 1280 px (the theme's font): shown code must fit."""

_PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # src/aiayn


def _qualified_name(obj: object) -> str:
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not module or not qualname or not module.startswith("aiayn"):
        raise TypeError(
            f"show_source: expected a function, class or method of the aiayn package, got {obj!r}"
        )
    return f"{module}.{qualname}"


def _strip_docstring(source: str) -> str:
    """Drop the docstring of the function or class that ``source`` defines (the page's prose explains it)."""
    lines = source.splitlines(keepends=True)
    body_start = None
    for i, line in enumerate(
        lines
    ):  # the end of the signature: the first line ending in ':' at depth 0
        if line.rstrip().endswith(":") and not line.lstrip().startswith(
            ("@", "#")
        ):
            depth = sum(
                part.count("(") - part.count(")") for part in lines[: i + 1]
            )
            if depth == 0:
                body_start = i + 1
                break
    if body_start is None or body_start >= len(lines):
        return source
    first = lines[body_start].lstrip()
    quote = first[:3]
    if quote not in ('"""', "'''"):
        return source
    end = body_start
    rest = first[3:]
    if quote not in rest:
        end += 1
        while end < len(lines) and quote not in lines[end]:
            end += 1
    return "".join(lines[:body_start] + lines[end + 1 :])


def source_of(obj: object, docstring: bool = False) -> str:
    """The source of ``obj`` as installed, dedented, without its docstring unless ``docstring=True``."""
    _qualified_name(obj)
    source = textwrap.dedent(inspect.getsource(obj))
    if not docstring:
        source = _strip_docstring(source)
    return source.rstrip("\n") + "\n"


@dataclass(frozen=True)
class SourceBlock:
    """A block of package code: its qualified name, its file inside the package, its text."""

    name: str
    path: str
    code: str
    language: str = "python"

    def _repr_markdown_(self) -> str:
        fence = f"```{self.language}"
        return f"`{self.name}`, from `{self.path}`:\n\n{fence}\n{self.code}```\n"

    def __repr__(self) -> str:
        header = f"# {self.name}, from {self.path}"
        if len(header) > WIDTH:  # a deep name: the file on a line of its own
            header = f"# {self.name}\n# from {self.path}"
        return f"{header}\n{self.code}"


MARKER = " \\"
"""Ends a wrapped line's first part: a backslash, as Python's own line continuation."""


def _comment_columns(code: str) -> dict[int, int]:
    """The column where a comment starts, per line (1-based) that has one; empty if ``code`` does not tokenize."""
    columns = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type == tokenize.COMMENT:
                columns[token.start[0]] = token.start[1]
    except (tokenize.TokenError, SyntaxError):
        pass
    return columns


def _cut(line: str, indent: int, room: int) -> int:
    """Where to cut ``line`` so that at most ``room`` characters stay: its last space outside braces.

    A space inside ``{...}`` (an f-string's replacement field, where a line may not be broken)
    is taken only when there is no other; with no space at all, the cut falls inside a word.
    """
    spaces, depth = [], 0
    for i, char in enumerate(line[: room + 1]):
        depth += (char == "{") - (char == "}")
        if char == " " and i > indent + 1:
            spaces.append((depth <= 0, i))
    return max(spaces)[1] if spaces else room


def _js_comment_columns(code: str) -> dict[int, int]:
    """As ``_comment_columns`` for JavaScript: where a ``//`` comment starts outside strings."""
    columns: dict[int, int] = {}
    quote = None  # the open string; only a template literal spans lines
    for n, line in enumerate(code.splitlines(), 1):
        i = 0
        while i < len(line):
            char = line[i]
            if quote:
                if char == "\\":
                    i += 1
                elif char == quote:
                    quote = None
            elif char in "'\"`":
                quote = char
            elif line.startswith("//", i):
                columns[n] = i
                break
            i += 1
        if quote != "`":
            quote = None
    return columns


def _wrap_line(
    line: str, width: int, comment_at: int | None, comment: str = "#"
) -> list[str]:
    """Cut ``line`` into pieces of at most ``width`` characters, each but the last ending in ``MARKER``."""
    indent = len(line) - len(line.lstrip())
    pieces = []
    while len(line) > width:
        cut = _cut(line, indent, width - len(MARKER))
        head, rest = line[:cut].rstrip(), line[cut:].lstrip()
        pieces.append(head + MARKER)
        in_comment = comment_at is not None and cut > comment_at
        prefix = " " * min(indent + 4, width // 2) + (
            f"{comment} " if in_comment else ""
        )
        line, indent = prefix + rest, len(prefix)
        comment_at = len(prefix) - len(comment) - 1 if in_comment else None
    return [*pieces, line]


# --- Python: cut only where Python allows it --------------------------------------------------------


@dataclass(frozen=True)
class _Char:
    """What a character of Python source is: ``code``, ``comment``, ``text`` (a multi-line string),
    ``str`` (a one-line string literal: its opening, e.g. ``f"``, and the depth of ``{...}`` there)
    or ``fixed`` (never cut before it)."""

    kind: str
    opening: str = ""
    depth: int = 0


_CODE, _COMMENT, _TEXT = _Char("code"), _Char("comment"), _Char("text")
_FIXED = _Char("fixed")


def _python_chars(code: str) -> list[list[_Char]] | None:
    """Per line of ``code``, what each character is; ``None`` if ``code`` does not tokenize."""
    lines = code.splitlines()
    chars = [[_CODE] * len(line) for line in lines]
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    starts = []  # Python 3.12+: an f-string is FSTRING_START ... FSTRING_END
    for token in tokens:
        name = tokenize.tok_name[token.type]
        if name == "FSTRING_START":
            starts.append(token.start)
        elif name in ("STRING", "FSTRING_END"):
            start = starts.pop() if name == "FSTRING_END" else token.start
            _mark_string(lines, chars, start, token.end)
        elif token.type == tokenize.COMMENT:
            row, col = token.start
            chars[row - 1][col:] = [_COMMENT] * (len(lines[row - 1]) - col)
    return chars


def _mark_string(lines, chars, start, end) -> None:
    (row, col), (end_row, end_col) = start, end
    if row != end_row:  # over several lines: its text may be reflowed
        for r in range(row, end_row + 1):
            first = col if r == row else 0
            last = end_col if r == end_row else len(lines[r - 1])
            chars[r - 1][first:last] = [_TEXT] * (last - first)
        return
    literal = lines[row - 1][col:end_col]
    body = literal.lstrip("bBrRuUfF")
    quote = body[:3] if body[:3] in ('"""', "'''") else body[0]
    opening = literal[: len(literal) - len(body)] + quote
    is_f = "f" in opening.lower()
    depth, marks = 0, []
    for i, char in enumerate(literal):
        if is_f:  # "{{" counts twice, so no cut there either
            depth += (char == "{") - (char == "}")
        inside = len(opening) <= i < len(literal) - len(quote)
        marks.append(_Char("str", opening, depth) if inside else _FIXED)
    chars[row - 1][col:end_col] = marks


def _python_cut(line: str, kinds: list[_Char], indent: int, width: int):
    """The last place Python allows a cut of ``line``, at a space if it can: ``(position, piece, rest,
    rest's kinds or None)``, or ``None``."""
    at_space = anywhere = None
    for i in range(indent + 2, min(len(line), width + 1)):
        char, kind = kinds[i], kinds[i].kind
        before = line[i - 1]
        if kind == "str":  # close the literal, open it again below
            close = char.opening.lstrip("bBrRuUfF")
            ok = char.depth == 0 and kinds[i - 1] == char
            # a field's braces have depth > 0, escaped ones ("{{", "}}") too
            ok = ok and "\\" not in (before, line[i])
            ok = ok and i + len(close) + len(MARKER) <= width
            if ok:
                cut = (i, line[:i] + close + MARKER, char.opening + line[i:])
                cut += ([_FIXED] * len(char.opening) + kinds[i:],)
                anywhere = cut
                at_space = cut if before == " " else at_space
            continue
        if line[i] != " " or kinds[i - 1].kind != kind:
            continue
        head = line[:i].rstrip()
        if kind == "code" and len(head) + len(MARKER) <= width:
            at_space = anywhere = (i, head + MARKER, line[i:].lstrip(), None)
        elif kind in ("comment", "text") and len(head) <= width:
            at_space = anywhere = (i, head, line[i:].lstrip(), None)
    if anywhere is None and kinds[width - 1].kind == "comment":
        # a comment with no space to cut at (a rule of dashes)
        anywhere = (width - 1, line[: width - 1], line[width - 1 :], None)
    return at_space or anywhere


def _wrap_python_line(
    line: str, kinds: list[_Char], width: int
) -> list[str]:
    """Cut ``line`` where Python allows it; a piece that cannot be cut stays as it is."""
    indent = len(line) - len(line.lstrip())
    first_indent, pieces = indent, []
    while len(line) > width:
        cut = _python_cut(line, kinds, indent, width)
        if cut is None:
            break
        i, piece, rest, rest_kinds = cut
        pieces.append(piece)
        kind = kinds[i].kind
        prefix = " " * min(first_indent + 4, width // 2)
        indent = len(prefix)
        if kind == "comment":
            prefix += "# "
        if rest_kinds is None:
            rest_kinds = kinds[len(line) - len(rest) :]
        line = prefix + rest
        fill = {"comment": _COMMENT, "text": _TEXT}.get(kind, _CODE)
        kinds = [fill] * len(prefix) + rest_kinds
    return [*pieces, line]


# --- JavaScript: a line break is a space there, outside strings and comments --------------------

# after these words a line break would end the statement (automatic semicolon insertion)
_JS_NO_BREAK_AFTER = (
    "return",
    "throw",
    "break",
    "continue",
    "yield",
    "async",
)


def _js_kinds(code: str) -> list[list[str]]:
    """Per line of ``code``, what each character is: ``code``, ``str`` or ``comment``."""
    kinds, quote = (
        [],
        None,
    )  # the open string; only a template literal spans lines
    for line in code.splitlines():
        marks, i = [], 0
        while i < len(line):
            char = line[i]
            if quote:
                marks.append("str")
                if char == "\\" and i + 1 < len(line):
                    marks.append("str")
                    i += 1
                elif char == quote:
                    quote = None
            elif char in "'\"`":
                quote = char
                marks.append("str")
            elif line.startswith("//", i):
                marks += ["comment"] * (len(line) - i)
                break
            else:
                marks.append("code")
            i += 1
        kinds.append(marks)
        if quote != "`":
            quote = None
    return kinds


def _wrap_js_line(line: str, kinds: list[str], width: int) -> list[str]:
    """Cut ``line`` at its last space in code or in a comment that fits; no marker (JavaScript has
    no line continuation, and needs none). A line with no such space stays whole."""
    first_indent = len(line) - len(line.lstrip())
    pieces, indent = [], first_indent
    while len(line) > width:
        cut = None
        for i in range(indent + 1, min(len(line), width + 1)):
            if (
                line[i] != " "
                or kinds[i] == "str"
                or kinds[i - 1] != kinds[i]
            ):
                continue
            head = line[:i].rstrip()
            if kinds[i] == "code" and head.split()[-1] in _JS_NO_BREAK_AFTER:
                continue
            cut = i
        if cut is None:
            break
        kind, head, rest = (
            kinds[cut],
            line[:cut].rstrip(),
            line[cut:].lstrip(),
        )
        pieces.append(head)
        prefix = " " * min(first_indent + 4, width // 2)
        indent = len(prefix)
        if kind == "comment":
            prefix += "// "
        line = prefix + rest
        kinds = [kind] * len(prefix) + kinds[len(kinds) - len(rest) :]
    return [*pieces, line]


_COMMENTS = {
    "python": ("#", _comment_columns),
    "javascript": ("//", _js_comment_columns),
}


def wrap_code(
    code: str, width: int = WIDTH, language: str = "python"
) -> str:
    """Wrap the lines of ``code`` wider than ``width`` for display; lines that fit are left alone.

    Python is cut only where Python allows it, so that the wrapped code is the same program: at
    a space between tokens, marked `` \\``; inside a string, closed and opened again (two
    literals that Python joins), never inside an f-string's ``{...}``; a comment goes on as a
    comment. JavaScript, which needs no marker, is cut at a space outside its strings (never
    after ``return``), a comment going on as ``// ``. A line with no such place stays whole. The
    piece below is indented four spaces more.

    Args:
        code: source text.
        width: the widest line shown, ``WIDTH`` by default.
        language: ``"python"`` or ``"javascript"`` (how comments are marked).

    Returns:
        ``code`` with every line at most ``width`` characters long.
    """
    if isinstance(width, bool) or not isinstance(width, int) or width < 20:
        raise ValueError(f"width must be an integer >= 20, got {width!r}")
    if language not in _COMMENTS:
        raise ValueError(
            f"language must be one of {sorted(_COMMENTS)}, got {language!r}"
        )
    lines = code.splitlines(keepends=True)
    if all(len(line.rstrip("\n")) <= width for line in lines):
        return code
    comment, columns_of = _COMMENTS[language]
    comments = columns_of(code)
    chars = _python_chars(code) if language == "python" else None
    js_kinds = _js_kinds(code) if language == "javascript" else None
    out = []
    for n, line in enumerate(lines, 1):
        text = line.rstrip("\n")
        end = line[len(text) :]
        if len(text) <= width:
            out.append(line)
            continue
        if chars is not None:
            wrapped = _wrap_python_line(text, chars[n - 1], width)
        elif language == "javascript":
            wrapped = _wrap_js_line(text, js_kinds[n - 1], width)
        else:
            wrapped = _wrap_line(text, width, comments.get(n), comment)
        out.append("\n".join(wrapped) + end)
    return "".join(out)


def show_source(obj: object, docstring: bool = False) -> SourceBlock:
    """Return ``obj``'s installed source as a block that notebooks render as highlighted code.

    Lines wider than ``WIDTH`` are wrapped for display (``wrap_code``); code that fits is shown
    exactly as it is.

    Args:
        obj: a function, class or method defined in ``aiayn``.
        docstring: keep the docstring (default: drop it; the page's prose explains the code).

    Raises:
        TypeError: ``obj`` is not defined in the aiayn package.
    """
    name = _qualified_name(obj)
    code = wrap_code(source_of(obj, docstring=docstring))
    # a decorated function (@torch.no_grad()): the file of the function it wraps
    path = Path(inspect.getsourcefile(inspect.unwrap(obj))).resolve()
    try:
        rel = f"aiayn/{path.relative_to(_PACKAGE_ROOT).as_posix()}"
    except ValueError:
        rel = path.name
    return SourceBlock(name=name, path=rel, code=code)


# --- The JavaScript the website runs ---------------------------------------------------------------

JS_FILE = "web/translator.mjs"
"""The page's twin of ``aiayn.export.translator``, shipped inside the package."""


def _js_definition(name: str) -> re.Pattern:
    return re.compile(
        rf"^(?:export\s+)?(?:async\s+)?(?:function\*?|class)\s+{re.escape(name)}\b",
        re.M,
    )


def js_source_of(name: str, file: str = JS_FILE, jsdoc: bool = False) -> str:
    """The source of the top-level function or class ``name`` in a JavaScript file of the package.

    The definition runs from its ``function``/``class`` line to the first line after it that is
    a lone ``}`` (the files are formatted so: a top-level body closes at column 0). The JSDoc
    comment right above it (``/** ... */``) is left out unless ``jsdoc=True``.

    Args:
        name: e.g. ``"beamSearch"``.
        file: the file, relative to the package (default ``web/translator.mjs``).
        jsdoc: keep the JSDoc comment.

    Raises:
        FileNotFoundError: the package has no such file.
        ValueError: the file defines no top-level ``name``.
    """
    if "." in name:
        return _js_method_of(name, file, jsdoc)
    path = _PACKAGE_ROOT / file
    if not path.is_file():
        raise FileNotFoundError(f"show_js: the package has no file {file}")
    text = path.read_text(encoding="utf-8")
    found = _js_definition(name).search(text)
    if found is None:
        defined = re.findall(
            r"^(?:export\s+)?(?:async\s+)?(?:function\*?|class)\s+(\w+)",
            text,
            re.M,
        )
        raise ValueError(
            f"show_js: aiayn/{file} defines no top-level function or class "
            f"{name!r}; it defines {defined}"
        )
    lines = text[found.start() :].splitlines()
    end = next((i for i, line in enumerate(lines) if line == "}"), None)
    if end is None:
        raise ValueError(
            f"show_js: {name} in aiayn/{file} has no closing '}}' at column 0"
        )
    code = "\n".join(lines[: end + 1]) + "\n"
    before = text[: found.start()].rstrip()
    if jsdoc and before.endswith("*/"):
        start = before.rfind("/**")
        if start >= 0 and before[start:].count("*/") == 1:
            code = before[start:] + "\n" + code
    return code


def _js_method_of(name: str, file: str, jsdoc: bool) -> str:
    """``Class.method``: the method's lines in the class (indented two spaces), dedented."""
    cls, method = name.split(".", 1)
    body = js_source_of(cls, file)
    found = re.compile(
        rf"^  (?:static\s+)?(?:async\s+)?{re.escape(method)}\(", re.M
    ).search(body)
    if found is None:
        defined = re.findall(
            r"^  (?:static\s+)?(?:async\s+)?(\w+)\(.*\{$", body, re.M
        )
        raise ValueError(
            f"show_js: class {cls} in aiayn/{file} has no method "
            f"{method!r}; it has {defined}"
        )
    lines = body[found.start() :].splitlines()
    end = next((i for i, line in enumerate(lines) if line == "  }"), None)
    if end is None:
        raise ValueError(
            f"show_js: {name} in aiayn/{file} has no closing '}}' at column 2"
        )
    code = "\n".join(lines[: end + 1])
    before = body[: found.start()].rstrip()
    if jsdoc and before.endswith("*/"):
        start = before.rfind("/**")
        if start >= 0 and before[start:].count("*/") == 1:
            code = "  " + before[start:] + "\n" + code
    return textwrap.dedent(code) + "\n"


def show_js(
    name: str, file: str = JS_FILE, jsdoc: bool = False
) -> SourceBlock:
    """Return the JavaScript function or class ``name`` as a block that notebooks render as code.

    The page's search (``aiayn/web/translator.mjs``) mirrors ``aiayn.export.translator`` function by
    function; a chapter shows the two side by side, ``show_source`` for the Python and this for
    the JavaScript. Lines wider than ``WIDTH`` are wrapped for display (``wrap_code``).

    Args:
        name: the function or class, e.g. ``"beamSearch"``, or a class's method,
            ``"OnnxModel.step"``.
        file: the file, relative to the package (default ``web/translator.mjs``).
        jsdoc: keep its JSDoc comment (default: drop it, as ``show_source`` drops docstrings).
    """
    code = wrap_code(
        js_source_of(name, file, jsdoc=jsdoc), language="javascript"
    )
    return SourceBlock(
        name=name, path=f"aiayn/{file}", code=code, language="javascript"
    )


def translator_page():
    """The ``<div>`` where section 11.4 mounts the in-browser translator (``aiayn/web/page.mjs``).

    The website serves ``page.mjs`` from ``_static/translator/``; where it is absent (Colab, a
    local Jupyter), the import fails quietly and the ``<div>`` keeps its one line.
    """
    from IPython.display import HTML

    return HTML(
        '<div id="aiayn-translator">\n'
        "<p>The translator runs on the book's website, in the page's own\n"
        "JavaScript; it cannot run here.</p>\n"
        "</div>\n"
        '<script type="module">\n'
        'import("../_static/translator/page.mjs")\n'
        '  .then((page) => page.mount(document.getElementById("aiayn-translator")))\n'
        "  .catch(() => {});  // not on the website: the line above stays\n"
        "</script>"
    )


def bleu_page():
    """The ``<div>`` where chapter 9 mounts its BLEU calculator (``aiayn/web/bleu_page.mjs``).

    The calculator's numbers come from ``aiayn/web/bleu.mjs``, the twin of ``aiayn.bleu``. The
    website serves both from ``_static/translator/``, as it serves the translator; elsewhere (Colab,
    a local Jupyter) the import fails quietly and the ``<div>`` keeps its one line.
    """
    from IPython.display import HTML

    return HTML(
        '<div id="aiayn-bleu">\n'
        "<p>The BLEU calculator runs on the book's website, in the page's\n"
        "own JavaScript; here, use <code>BleuCalculator</code> below.</p>\n"
        "</div>\n"
        '<script type="module">\n'
        'import("../_static/translator/bleu_page.mjs")\n'
        '  .then((page) => page.mount(document.getElementById("aiayn-bleu")))\n'
        "  .catch(() => {});  // not on the website: the line above stays\n"
        "</script>"
    )
