"""aiayn.pages.source: the package's code shown on the page is the installed code, without its docstring, and fits."""

import ast
import importlib
import inspect
import io
import pkgutil
import re
import textwrap
import tokenize

import pytest

from aiayn.pages import source
from aiayn.pages.source import SourceBlock, show_source, source_of


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
    assert markdown.startswith("`aiayn.pages.source.source_of`, from `aiayn/pages/source.py`:")
    assert "```python\ndef source_of(" in markdown
    assert isinstance(block, SourceBlock) and block.code == source_of(source.source_of)


def test_a_decorated_function_names_its_own_file():
    from aiayn.decoding import reference

    block = show_source(reference.greedy_decode)
    assert block.path == "aiayn/decoding/reference.py"
    assert block.code.startswith("@torch.no_grad()\ndef greedy_decode(")


def test_objects_outside_the_package_are_refused():
    with pytest.raises(TypeError, match="expected a function, class or method of the aiayn package"):
        show_source(_module_function)


def test_lines_wider_than_the_code_box_are_wrapped_for_display(monkeypatch):
    def wide():
        x = 1  # a comment that goes on and on, far past the edge of the code box on the website
        assert x
        return "a string that also goes on and on, far past the edge of the code box on the website"

    monkeypatch.setattr(wide, "__module__", "aiayn.fake")
    lines = show_source(wide).code.splitlines()
    assert all(len(line) <= source.WIDTH for line in lines)
    assert lines == [
        "def wide():",
        "    x = 1  # a comment that goes on and on, far past the edge of the code box",
        "        # on the website",
        "    assert x",
        '    return "a string that also goes on and on, far past the edge of the " \\',
        '        "code box on the website"',
    ]
    assert same_code(show_source(wide).code, source_of(wide))


def test_code_that_fits_is_shown_as_it_is():
    code = "def f(x):\n    return x  # short\n"
    assert source.wrap_code(code) is code


def test_wrapping_keeps_the_indentation_and_marks_every_cut():
    line = "        f(" + ", ".join(f"word{i}" for i in range(40)) + ")"
    lines = source.wrap_code(line + "\n", width=40).splitlines()
    assert all(len(x) <= 40 for x in lines) and len(lines) > 5
    assert all(x.endswith(" \\") for x in lines[:-1]) and not lines[-1].endswith("\\")
    assert all(x.startswith(" " * 12) for x in lines[1:])  # four spaces deeper than the line
    words = " ".join(x.strip().removesuffix("\\") for x in lines).split()
    assert words == line.split()  # nothing lost, nothing added


def test_a_word_longer_than_the_box_is_cut_inside_a_string_into_two_literals():
    code = "x = '" + "y" * 100 + "'\n"
    lines = source.wrap_code(code).splitlines()
    assert all(len(x) <= source.WIDTH for x in lines)
    assert len(lines) == 3 and lines[0] == "x = \\"  # the last space first, then inside the word
    assert lines[1].endswith("' \\") and lines[2].startswith("    'y")
    assert same_code(source.wrap_code(code), code)


def test_a_space_inside_an_f_string_field_is_never_cut():
    code = 'f"some words before the field and then {a + b} and more words after it, enough to wrap"\n'
    wrapped = source.wrap_code(code, width=50)
    for line in wrapped.splitlines():
        assert line.count("{") == line.count("}")
    assert same_code(wrapped, code)


@pytest.mark.parametrize(
    "code",
    [
        'x = f"{a!r} is not {b!r}: expected something else, something longer than this line"\n',
        'x = rb"a\\ b c d e f g h i j k l m n o p q r s t u v w x y z a b c d e f g h i j k l m"\n',
        "y = '''triple quoted on one line, long enough to need a cut, or two of them here'''\n",
        "if x:  # a comment after code that goes on, far past the edge of the box\n    pass\n",
        "z = call(argument_one, argument_two)  # and a comment that is long enough to wrap\n",
    ],
)
def test_a_wrapped_listing_is_the_same_code(code):
    wrapped = source.wrap_code(code, width=40)
    assert wrapped != code and same_code(wrapped, code)


def test_a_line_python_cannot_cut_stays_whole():
    code = "x" * 90 + " = 1\n"
    assert source.wrap_code(code) == code


def test_wrap_code_refuses_a_box_too_narrow():
    with pytest.raises(ValueError, match="width must be an integer >= 20, got 5"):
        source.wrap_code("x = 1\n", width=5)


def _public_objects():
    import aiayn

    names = ["aiayn", *(m.name for m in pkgutil.walk_packages(aiayn.__path__, "aiayn."))]
    for module_name in names:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                yield f"{module_name}.{name}", obj


PUBLIC = dict(_public_objects())


def _comments(code: str) -> str:
    """The comments' text, without the spaces and ``#`` that wrapping adds."""
    tokens = tokenize.generate_tokens(io.StringIO(code).readline)
    return "".join("".join(t.string.replace("#", "").split()) for t in tokens if t.type == tokenize.COMMENT)


def _strings_as_words(tree: ast.AST) -> str:
    """The tree, with every string that spans lines (a docstring, reflowed for display) as its words."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "\n" in node.value:
            node.value = " ".join(node.value.split())
    return ast.dump(tree)


def same_code(shown: str, code: str) -> bool:
    """``shown`` parses to the same program as ``code``, with the same comments, word for word.

    A string over several lines (a docstring) may be reflowed: its words must stay the same.
    """
    if shown == code:  # e.g. a class whose body is its docstring, shown without it
        return True
    a, b = (ast.parse(textwrap.dedent(c)) for c in (shown, code))
    same = ast.dump(a) == ast.dump(b) or _strings_as_words(a) == _strings_as_words(b)
    return same and _comments(shown) == _comments(code)


@pytest.mark.parametrize("docstring", [False, True], ids=["code", "with docstring"])
def test_every_shown_listing_is_the_source_as_python_reads_it(docstring):
    differ = [
        name
        for name, obj in PUBLIC.items()
        if not same_code(show_source(obj, docstring=docstring).code, source_of(obj, docstring=docstring))
    ]
    assert not differ, differ


def test_every_public_object_is_walked():
    assert len(PUBLIC) > 150 and "aiayn.attention.MultiHeadAttention" in PUBLIC


@pytest.mark.parametrize("docstring", [False, True], ids=["code", "with docstring"])
def test_every_public_object_of_the_package_can_be_shown(docstring):
    wide = {}
    for name, obj in PUBLIC.items():
        block = show_source(obj, docstring=docstring)
        assert block.code.strip(), name
        lines = [line for line in block.code.splitlines() if len(line) > source.WIDTH]
        # the one kind of line Python cannot break: an f-string whose wide part is one {...} field
        lines = [x for x in lines if not (x.lstrip().startswith('f"{') and x in source.wrap_code(f"(\n{x}\n)\n"))]
        if lines:
            wide[name] = lines
    assert not wide, wide


# --- show_js: the JavaScript the website runs ------------------------------------------------------------

JS = """// a module
const X = 1;

/** Add two numbers.
 *  x, y -> x + y */
export function add(x, y) {
  return x + y; // the body stays
}

export async function wide(a) {
  const s = "a // inside a string is no comment";
  return a; // a comment that goes on and on, far past the edge of the code box on the website
}
"""


def test_show_js_shows_a_function_without_its_jsdoc(tmp_path):
    (tmp_path / "m.mjs").write_text(JS)
    block = source.show_js("add", file=str(tmp_path / "m.mjs"))
    assert block.code == "export function add(x, y) {\n  return x + y; // the body stays\n}\n"
    assert block.language == "javascript"
    assert "```javascript\nexport function add(" in block._repr_markdown_()
    with_doc = source.js_source_of("add", file=str(tmp_path / "m.mjs"), jsdoc=True)
    assert with_doc.startswith("/** Add two numbers.\n *  x, y -> x + y */\nexport function add(")


def test_show_js_wraps_a_wide_comment_as_a_comment(tmp_path):
    (tmp_path / "m.mjs").write_text(JS)
    lines = source.show_js("wide", file=str(tmp_path / "m.mjs")).code.splitlines()
    assert all(len(line) <= source.WIDTH for line in lines)
    # no backslash: JavaScript has no line continuation, and a comment goes on as one
    assert lines[3].startswith("      // ") and not lines[2].endswith("\\"), lines
    assert lines[1] == '  const s = "a // inside a string is no comment";'


CLASS_JS = """export class Model {
  /** One step. */
  async step(x) {
    if (x) {
      return x + 1;
    }
    return 0;
  }

  static make() {
    return new Model();
  }
}
"""


def test_show_js_cuts_code_outside_strings_and_never_after_return():
    code = 'function f() {\n  return "a string with spaces in it that is long" + other + more + more;\n}\n'
    lines = source.wrap_code(code, width=60, language="javascript").splitlines()
    assert lines[1] == '  return "a string with spaces in it that is long" + other +'
    assert "".join(line.strip() + " " for line in lines).split() == code.split()


def test_show_js_shows_a_method_of_a_class(tmp_path):
    (tmp_path / "c.mjs").write_text(CLASS_JS)
    file = str(tmp_path / "c.mjs")
    step = "async step(x) {\n  if (x) {\n    return x + 1;\n  }\n  return 0;\n}\n"
    assert source.show_js("Model.step", file=file).code == step
    assert source.js_source_of("Model.step", file, jsdoc=True) == "/** One step. */\n" + step
    assert source.show_js("Model.make", file=file).code == "static make() {\n  return new Model();\n}\n"
    with pytest.raises(ValueError, match=r"class Model in .* has no method 'run'; it has \['step', 'make'\]"):
        source.show_js("Model.run", file=file)


def test_show_js_names_what_the_file_defines(tmp_path):
    (tmp_path / "m.mjs").write_text(JS)
    expected = r"defines no top-level function or class 'beam'; it defines \['add', 'wide'\]"
    with pytest.raises(ValueError, match=expected):
        source.show_js("beam", file=str(tmp_path / "m.mjs"))


def test_every_function_of_the_page_translator_can_be_shown():
    """aiayn/web/translator.mjs ships in the package; each of its top-level functions fits the code box."""
    text = (source._PACKAGE_ROOT / source.JS_FILE).read_text(encoding="utf-8")
    names = re.findall(r"^(?:export\s+)?(?:async\s+)?(?:function|class)\s+(\w+)", text, re.M)
    assert {"bpeEncode", "greedy", "beamSearch"} <= set(names), names
    for name in names:
        block = source.show_js(name)
        assert block.path == "aiayn/web/translator.mjs" and block.code.rstrip().endswith("}"), name
        assert all(len(line) <= source.WIDTH for line in block.code.splitlines()), name


def test_bleu_page_mounts_a_module_the_site_serves():
    from aiayn.pages.source import bleu_page

    html = bleu_page().data
    module = re.search(r'import\("\.\./_static/translator/(\w+\.mjs)"\)', html)
    assert module is not None, html
    assert (source._PACKAGE_ROOT / "web" / module[1]).is_file()
    assert 'id="aiayn-bleu"' in html and 'getElementById("aiayn-bleu")' in html
