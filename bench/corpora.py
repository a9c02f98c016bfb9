"""Labelled corpora for bench/retrieval.py: real code and prose, doc comments as queries;
and whole trees with their reference definitions and uses for the navigation
benchmarks (``nav_tree`` and what follows it, at the end).

Each builder copies source files nobody on this project wrote into a root
directory with their documentation removed (line numbers kept), and returns
labels: ``{"query", "file", "start", "end"}`` where the span is the
documented definition's lines (1-based, inclusive) or, for prose, the whole
file. Everything is deterministic for a given seed and source version.

- ``python``: standard-library modules; query = a docstring's first paragraph.
- ``ts``: TypeScript's ``lib.*.d.ts`` (``npm pack typescript@TS_VERSION``); query = JSDoc.
- ``js``: lodash's per-function modules (``npm pack lodash@LODASH_VERSION``); query = JSDoc.
- ``java``: JDK sources from a ``src.zip``; query = Javadoc.
- ``prose``: the long descriptions of the packages installed beside this
  Python (``*.dist-info/METADATA``); query = the ``Summary:`` header.
"""

from __future__ import annotations

import ast
import html
import random
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

TS_VERSION = "5.6.3"
LODASH_VERSION = "4.17.21"
CACHE = Path.home() / ".cache" / "dir2mcp-bench"
JDK_SRC_ZIPS = ("/usr/lib/jvm/java-17-openjdk-amd64/lib/src.zip", "/usr/lib/jvm/*/lib/src.zip")
JAVA_PACKAGES = ("util", "lang", "io", "time", "text", "net", "math", "nio/file")
# Worker-scope libs repeat lib.dom's declarations and docs word for word.
TS_SKIP = re.compile(r"lib\.(webworker|sharedworker|serviceworker|audioworklet)")
# lodash.js and core.js bundle the modules (and their docs) again; *.min.js is minified.
LODASH_SKIP = {"lodash.js", "core.js", "fp.js"}
MIN_WORDS = 4
MAX_QUERY_CHARS = 300
MIN_DESCRIPTION_CHARS = 1500
THIS_PROJECT = "dir2mcp"

CODE_LANGUAGES = ("python", "ts", "js", "java")
LANGUAGES = (*CODE_LANGUAGES, "prose")


@dataclass(frozen=True)
class Corpus:
    """A built corpus: its labels (queries with targets) and what it is made of."""

    language: str
    kind: str  # the embedding kind of its chunks: "code" or "text"
    labels: list[dict]
    files: int
    lines: int
    candidates: int  # labels available before sampling
    source: str


def build(language: str, root: Path, *, max_lines: int, queries: int, seed: int = 5) -> Corpus:
    """Write ``language``'s corpus under ``root`` (created) and sample ``queries`` labels."""
    root.mkdir(parents=True, exist_ok=True)
    builder = _BUILDERS[language]
    sources, source = builder.sources(seed)
    labels, files, lines = [], 0, 0
    for rel_path, text in sources:
        if lines + text.count("\n") + 1 > max_lines:
            continue
        found = builder.label(rel_path, text)
        if found is None:
            continue
        blanked, file_labels = found
        target = root / rel_path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(blanked)
        labels.extend(file_labels)
        files += 1
        lines += blanked.count("\n") + 1
    unique = unambiguous(labels)
    random.Random(seed).shuffle(unique)
    kind = "text" if language == "prose" else "code"
    sample = [{k: v for k, v in label.items() if k != SAMPLED_BY} for label in unique[:queries]]
    return Corpus(language, kind, sample, files, lines, len(unique), source)


def unambiguous(labels: list[dict]) -> list[dict]:
    """Labels whose query text no other label shares (an answer must be unique),
    judged by the text that chose the sample (``SAMPLED_BY`` where a label has it)."""
    counts = Counter(_norm(label.get(SAMPLED_BY, label["query"])) for label in labels)
    return [label for label in labels if counts[_norm(label.get(SAMPLED_BY, label["query"]))] == 1]


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def query_text(text: str) -> str | None:
    """Collapse whitespace, cut at a word boundary; None when under ``MIN_WORDS`` words."""
    words = text.split()
    if len(words) < MIN_WORDS:
        return None
    out = " ".join(words)
    if len(out) > MAX_QUERY_CHARS:
        out = out[:MAX_QUERY_CHARS].rsplit(" ", 1)[0]
    return out


@dataclass(frozen=True)
class _Builder:
    sources: Callable[[int], tuple[Iterator[tuple[str, str]], str]]
    label: Callable[[str, str], tuple[str, list[dict]] | None]


def _shuffled(items: Iterable, seed: int) -> list:
    ordered = sorted(items)
    random.Random(seed).shuffle(ordered)
    return ordered


# -- Python --------------------------------------------------------------------


def _python_sources(seed: int) -> tuple[Iterator[tuple[str, str]], str]:
    lib = Path(sysconfig.get_paths()["stdlib"])
    files = _shuffled((p for p in lib.glob("*.py") if not p.name.startswith(("_", "test"))), seed)
    texts = ((p.name, p.read_text(errors="replace")) for p in files)
    return texts, f"CPython {sys.version.split()[0]} standard library ({lib})"


def label_python(rel_path: str, source: str) -> tuple[str, list[dict]] | None:
    """Blank every docstring (a body left empty gets ``pass``); label definitions by theirs."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    lines = source.split("\n")
    labels = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Module):
            continue
        doc = ast.get_docstring(node, clean=True)
        if not (doc and node.body and isinstance(node.body[0], ast.Expr)):
            continue
        _blank_python_docstring(lines, node)
        query = query_text(doc.strip().split("\n\n")[0])
        if query and not isinstance(node, ast.Module):
            labels.append({"query": query, "file": rel_path, "start": node.lineno, "end": node.end_lineno})
    return "\n".join(lines), labels


def _blank_python_docstring(lines: list[str], node: ast.AST) -> None:
    expr = node.body[0]
    # ``def f(): "doc"`` keeps its ``def f():``; a body that was only the docstring gets ``pass``.
    same_line = expr.lineno == getattr(node, "lineno", 0)
    prefix = lines[expr.lineno - 1][: expr.col_offset] if same_line else ""
    for n in range(expr.lineno - 1, expr.end_lineno):
        lines[n] = ""
    filler = "pass" if len(node.body) == 1 and not isinstance(node, ast.Module) else ""
    if filler or prefix:
        lines[expr.lineno - 1] = ((prefix or " " * expr.col_offset) + filler).rstrip()


# -- doc comments through tree-sitter ---------------------------------------------


def _parser(language: str):
    import tree_sitter

    if language == "ts":
        import tree_sitter_typescript

        grammar = tree_sitter_typescript.language_typescript()
    elif language == "js":
        import tree_sitter_javascript

        grammar = tree_sitter_javascript.language()
    else:
        import tree_sitter_java

        grammar = tree_sitter_java.language()
    return tree_sitter.Parser(tree_sitter.Language(grammar))


_COMMENT_TYPES = {"comment", "block_comment", "line_comment"}
_PARSERS: dict[str, object] = {}


def _doc_comments(tree) -> Iterator:
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.type in _COMMENT_TYPES:
            if node.text.startswith(b"/**") and not node.text.startswith(b"/**/"):
                yield node
            continue
        stack.extend(reversed(node.children))


def _documented(comment):
    """The declaration a doc comment documents: the next non-comment sibling on the next line."""
    sibling = comment.next_named_sibling
    while sibling is not None and sibling.type in _COMMENT_TYPES:
        sibling = sibling.next_named_sibling
    if sibling is None or sibling.start_point[0] - comment.end_point[0] > 1:
        return None
    return sibling


def label_doc_comments(language: str, rel_path: str, source: str) -> tuple[str, list[dict]] | None:
    """Blank every ``/** … */`` comment; label the declaration each documents by its description."""
    parser = _PARSERS.get(language) or _PARSERS.setdefault(language, _parser(language))
    data = bytearray(source.encode())
    tree = parser.parse(bytes(data))
    labels = []
    for comment in _doc_comments(tree):
        target = _documented(comment)
        comment_text = comment.text.decode(errors="replace")
        query = query_text(doc_description(comment_text))
        if target is not None and query:
            start, end = target.start_point[0] + 1, target.end_point[0] + 1
            label = {"query": query, "file": rel_path, "start": start, "end": end}
            sampled_by = query_text(doc_description(comment_text, element_names=False))
            if sampled_by != query:
                label[SAMPLED_BY] = sampled_by or ""
            labels.append(label)
        for i in range(comment.start_byte, comment.end_byte):
            if data[i] not in b"\r\n":
                data[i] = 0x20
    text = "\n".join(line.rstrip() for line in data.decode(errors="replace").split("\n"))
    return text, labels


_INLINE_TAG = re.compile(r"\{@(\w+)\s*([^{}]*)\}")
_MD_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_HTML_TAG = re.compile(r"<[^>]+>")
_TAG_NAME = re.compile(r"</?([A-Za-z][\w:-]*)")
_PARAGRAPH = re.compile(r"\n\s*\n|<p\b[^>]*>", re.IGNORECASE)
# Markup that stands alone: no closing tag follows it.
_VOID_MARKUP = frozenset({"p", "br", "hr", "li", "dt", "dd", "img", "wbr"})
# Since 2026-11-29 (session 23) a tag that is not markup is the text it
# names: TypeScript's DOM docs write elements as ``<canvas>``, ``<input
# type="file">``, never closed. Stripping them left queries such as
# "for manipulating elements" (11 of 300 on seed 5, 16 on seed 6). The sample
# is still chosen by the descriptions as they were (``SAMPLED_BY``), so
# every corpus keeps its targets and only those queries read differently.
SAMPLED_BY = "sampled_by"


def _strip_markup(text: str, comment: str) -> str:
    """``text`` without its HTML markup: a closing tag, a void formatting tag,
    or an opening tag whose closing tag is in ``comment``; any other tag is
    kept as the words it holds (``<input type="file">`` reads ``input type="file"``)."""

    def markup(match: re.Match) -> str:
        tag = match.group(0)
        name = _TAG_NAME.match(tag)
        if name is None or tag.startswith("</"):
            return ""
        word = name.group(1).lower()
        if word in _VOID_MARKUP or re.search(rf"</{re.escape(word)}\s*>", comment, re.IGNORECASE):
            return ""
        return tag[1:-1].rstrip("/ ")

    return _HTML_TAG.sub(markup, text)


def doc_description(comment: str, *, element_names: bool = True) -> str:
    """A JSDoc/Javadoc comment's first paragraph, without markup or block tags;
    ``element_names=False``: every tag stripped, as before 2026-11-29 (session 23)."""
    body = comment.strip()
    body = body[3:] if body.startswith("/**") else body
    body = body[:-2] if body.endswith("*/") else body
    lines = [re.sub(r"^\s*\*? ?", "", line) for line in body.split("\n")]
    kept = []
    for line in lines:
        if line.lstrip().startswith("@"):
            break
        kept.append(line)
    first = _PARAGRAPH.split("\n".join(kept).strip(), maxsplit=1)[0]
    while (unwrapped := _INLINE_TAG.sub(_inline_tag, first)) != first:
        first = unwrapped
    first = _MD_LINK.sub(r"\1", first)
    first = _strip_markup(first, comment) if element_names else _HTML_TAG.sub("", first)
    return html.unescape(first.replace("`", ""))


def _inline_tag(match: re.Match) -> str:
    """What Javadoc/JSDoc renders for ``{@tag body}``: a link's label or target, a value's text."""
    tag, body = match.group(1), match.group(2).strip()
    if tag == "return":
        return f"Returns {body}"
    if tag.startswith("link"):
        target, _, label = body.partition(" ")
        return label.strip() or target.lstrip("#").replace("#", ".")
    return body


def stdlib_copy(cache: Path = CACHE) -> Path:
    """A copy of the interpreter's standard library (``site-packages`` and
    ``__pycache__`` left out), made once under ``cache``: the tree of
    bench/indexing.py and bench/time_to_dense.py. Not the library itself,
    because an interpreter installed by pyenv lies under pyenv's own
    ``.gitignore``, which hides it from the walk (0 files)."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    dest = cache / f"stdlib-{sys.version.split()[0]}"
    if not (dest / "os.py").is_file():
        partial = dest.with_name(dest.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        skip = shutil.ignore_patterns("site-packages", "__pycache__")
        shutil.copytree(lib, partial, symlinks=True, ignore=skip)
        shutil.rmtree(dest, ignore_errors=True)
        partial.rename(dest)
    return dest


def npm_package(spec: str, cache: Path = CACHE) -> Path:
    """The tarball of ``name@version`` from ``npm pack``, cached under ``cache``."""
    name, version = spec.rsplit("@", 1)
    tarball = cache / f"{name}-{version}.tgz"
    if not tarball.exists():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["npm", "pack", spec, "--pack-destination", str(cache)],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
    return tarball


def _tar_texts(tarball: Path, keep: Callable[[str], bool]) -> dict[str, str]:
    with tarfile.open(tarball) as archive:
        return {
            member.name.removeprefix("package/"): archive.extractfile(member).read().decode(errors="replace")
            for member in archive.getmembers()
            if member.isfile() and keep(member.name.removeprefix("package/"))
        }


def _ts_sources(seed: int) -> tuple[Iterator[tuple[str, str]], str]:
    texts = _tar_texts(
        npm_package(f"typescript@{TS_VERSION}"),
        lambda name: re.fullmatch(r"lib/lib\..*\.d\.ts", name) is not None and not TS_SKIP.search(name),
    )
    return ((name, texts[name]) for name in _shuffled(texts, seed)), f"typescript@{TS_VERSION} lib/*.d.ts"


def _js_sources(seed: int) -> tuple[Iterator[tuple[str, str]], str]:
    texts = _tar_texts(
        npm_package(f"lodash@{LODASH_VERSION}"),
        lambda name: (
            "/" not in name
            and name.endswith(".js")
            and not name.endswith(".min.js")
            and name not in LODASH_SKIP
        ),
    )
    return (
        ((f"lodash/{name}", texts[name]) for name in _shuffled(texts, seed)),
        f"lodash@{LODASH_VERSION} modules",
    )


def jdk_src_zip() -> Path | None:
    """The first JDK ``src.zip`` on this machine (a dangling link does not count)."""
    for pattern in JDK_SRC_ZIPS:
        for path in sorted(Path("/").glob(pattern.lstrip("/"))):
            if path.is_file():
                return path
    return None


def _java_sources(seed: int) -> tuple[Iterator[tuple[str, str]], str]:
    path = jdk_src_zip()
    if path is None:
        raise FileNotFoundError("no JDK src.zip found (apt-get install openjdk-17-source)")
    wanted = re.compile(rf"java\.base/java/({'|'.join(JAVA_PACKAGES)})/[A-Za-z]\w*\.java")
    archive = zipfile.ZipFile(path)
    names = _shuffled((n for n in archive.namelist() if wanted.fullmatch(n)), seed)

    def texts() -> Iterator[tuple[str, str]]:
        for name in names:
            yield name.removeprefix("java.base/"), archive.read(name).decode(errors="replace")

    return texts(), f"JDK sources {path.resolve()}"


# -- prose -----------------------------------------------------------------------


def _prose_sources(seed: int) -> tuple[Iterator[tuple[str, str]], str]:
    site = Path(sysconfig.get_paths()["purelib"])
    readmes = {}
    for metadata in sorted(site.glob("*.dist-info/METADATA")):
        message = Parser().parsestr(metadata.read_text(errors="replace"))
        name = (message.get("Name") or "").strip()
        body = message.get_payload() or message.get("Description") or ""
        summary = (message.get("Summary") or "").strip()
        if not name or name.lower() == THIS_PROJECT or len(body) < MIN_DESCRIPTION_CHARS:
            continue
        ext = "md" if "markdown" in (message.get("Description-Content-Type") or "") else "rst"
        # The summary rides in the file's first line, split off again by label_prose.
        readmes[f"{name.lower()}.{ext}"] = f"{summary}\n{body}"
    texts = ((name, readmes[name]) for name in _shuffled(readmes, seed))
    return texts, f"long descriptions of the packages in {site}"


def label_prose(rel_path: str, text: str) -> tuple[str, list[dict]] | None:
    """One label: the summary (first line) → the whole file; lines quoting it blanked."""
    summary, _, body = text.partition("\n")
    query = query_text(summary)
    if query is None:
        return None
    sentence = _norm(summary).rstrip(".")
    lines = ["" if sentence in _norm(line) else line for line in body.split("\n")]
    return "\n".join(lines), [{"query": query, "file": rel_path, "start": 1, "end": len(lines)}]


_BUILDERS = {
    "python": _Builder(_python_sources, label_python),
    "ts": _Builder(_ts_sources, lambda path, text: label_doc_comments("ts", path, text)),
    "js": _Builder(_js_sources, lambda path, text: label_doc_comments("js", path, text)),
    "java": _Builder(_java_sources, lambda path, text: label_doc_comments("java", path, text)),
    "prose": _Builder(_prose_sources, label_prose),
}


# -- navigation trees (bench/outline.py, bench/symbols.py, bench/agent_tokens.py) ----------------
#
# Whole source trees, as they are, for the navigation tools (issue #32): no
# labels, nothing blanked. Each is ``{rel_path: text}`` in path order.

RXJS_VERSION = "7.8.1"
GO_SRC_PACKAGE = "golang-1.19-src"  # Debian's Go standard library source (bookworm: 1.19.8)
NAV_LANGUAGES = ("python", "ts", "go")
_GENERATED = re.compile(r"^// Code generated .* DO NOT EDIT\.$", re.MULTILINE)


def nav_tree(language: str) -> tuple[dict[str, str], str]:
    """``language``'s tree for the navigation benchmarks and what it is.

    - ``python``: the standard library's modules (``test``/``tests``
      directories and ``site-packages`` left out);
    - ``ts``: rxjs's TypeScript sources (``src/**/*.ts`` of ``npm pack rxjs``);
    - ``go``: Go's standard library (Debian's ``golang-*-src``), without
      ``cmd``, ``vendor``, ``testdata``, ``_test.go`` files and files marked
      ``Code generated … DO NOT EDIT``.
    """
    if language == "python":
        lib = Path(sysconfig.get_paths()["stdlib"])
        texts = {}
        for path in sorted(lib.rglob("*.py")):
            rel = path.relative_to(lib)
            if not ({"site-packages", "test", "tests"} & set(rel.parts)):
                texts[rel.as_posix()] = path.read_text(errors="replace")
        return texts, f"CPython {sys.version.split()[0]} standard library"
    if language == "ts":
        texts = _tar_texts(
            npm_package(f"rxjs@{RXJS_VERSION}"),
            lambda name: name.startswith("src/") and name.endswith(".ts") and not name.endswith(".d.ts"),
        )
        return dict(sorted(texts.items())), f"rxjs@{RXJS_VERSION} src/**/*.ts"
    if language == "go":
        src, version = go_src()
        texts = {}
        for path in sorted(src.rglob("*.go")):
            rel = path.relative_to(src)
            skip = {"cmd", "vendor", "testdata"} & set(rel.parts) or path.name.endswith("_test.go")
            if skip:
                continue
            text = path.read_text(errors="replace")
            if not _GENERATED.search(text):
                texts[rel.as_posix()] = text
        return texts, f"Go {version} standard library ({GO_SRC_PACKAGE}, Debian), hand-written files"
    raise ValueError(f"no navigation tree for {language!r}")


def go_src(cache: Path = CACHE) -> tuple[Path, str]:
    """Go's ``src`` directory from Debian's package (``apt-get download``,
    unpacked under ``cache``; nothing installed) and its version."""
    target = cache / GO_SRC_PACKAGE
    found = sorted(target.glob("usr/share/go-*/src"))
    if not found:
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(["apt-get", "download", GO_SRC_PACKAGE], cwd=cache, check=True, capture_output=True)
        deb = sorted(cache.glob(f"{GO_SRC_PACKAGE}_*.deb"))[-1]
        subprocess.run(["dpkg-deb", "-x", str(deb), str(target)], check=True)
        found = sorted(target.glob("usr/share/go-*/src"))
    debs = sorted(cache.glob(f"{GO_SRC_PACKAGE}_*.deb"))
    version = debs[-1].name.split("_")[1] if debs else found[-1].parent.name.removeprefix("go-")
    return found[-1], version


def write_tree(texts: dict[str, str], root: Path) -> None:
    """The tree's files under ``root``."""
    for rel, text in texts.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


@dataclass(frozen=True)
class Definition:
    """A reference definition: the line its name is on, and its span (1-based)."""

    name: str
    line: int
    start: int
    end: int


def python_definitions(text: str) -> list[Definition] | None:
    """Every ``def``, ``async def`` and ``class`` by :mod:`ast`, nested ones too."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [
        Definition(
            node.name,
            node.lineno,
            min([node.lineno, *(d.lineno for d in node.decorator_list)]),
            node.end_lineno,
        )
        for node in ast.walk(tree)
        if isinstance(node, kinds)
    ]


_GO_FUNC = re.compile(r"func (?:\([^)]*\) *)?(\w+)")
_GO_TYPE = re.compile(r"type (\w+)\b")
_GO_SPEC = re.compile(r"\t(\w+)\b")


def go_definitions(text: str) -> list[Definition]:
    """Go's top-level ``func``s, methods and ``type``s by a line scan (no
    parser): ``func Name``/``func (recv) Name`` and ``type Name`` at the start
    of a line, and each ``\\tName`` directly inside a ``type (`` block. A span
    ends at the first ``}`` or ``)`` at the start of a later line when the
    declaration's line opens a block, else on its own line."""
    lines = text.split("\n")
    found: list[Definition] = []
    in_types = False
    for number, line in enumerate(lines, 1):
        if in_types:
            if line.startswith(")"):
                in_types = False
            elif (match := _GO_SPEC.match(line)) and not line.startswith("\t//"):
                found.append(_go_span(lines, match.group(1), number, "\t}"))
            continue
        if line.startswith("type ("):
            in_types = True
        elif match := _GO_FUNC.match(line):
            found.append(_go_span(lines, match.group(1), number, "}"))
        elif match := _GO_TYPE.match(line):
            found.append(_go_span(lines, match.group(1), number, "}"))
    return found


def _go_span(lines: list[str], name: str, number: int, closer: str) -> Definition:
    opened = lines[number - 1].rstrip()
    if not opened.endswith(("{", "(")):
        return Definition(name, number, number, number)
    for end in range(number, len(lines)):
        if lines[end].startswith(closer) or lines[end].startswith(closer.replace("}", ")")):
            return Definition(name, number, number, end + 1)
    return Definition(name, number, number, number)


# Keywords and the names of built-in types that no grammar calls an identifier.
_GO_WORDS = frozenset(
    "break case chan const continue default defer else fallthrough for func go goto if import interface "
    "map package range return select struct switch type var true false iota".split()
)
_TS_WORDS = frozenset(
    "break case catch class const continue debugger default delete do else enum export extends false "
    "finally for function if import in instanceof new null return super switch this throw true try "
    "typeof var void while with as implements interface let package private protected public static "
    "yield any boolean number string symbol bigint object never unknown undefined type from of get set "
    "async await declare readonly keyof infer is abstract override satisfies asserts unique namespace "
    "module require global constructor accessor out".split()
)
_WORD = re.compile(r"[A-Za-z_$][\w$]*")
_REGEX_BEFORE = set("(,=:[!&|?{};+-*%<>~^") | {""}


def lexical_uses(language: str, text: str) -> set[tuple[str, int]]:
    """(name, line) of every identifier token of a Go or TypeScript file
    outside comments, strings, runes and (TypeScript) regular expressions,
    keywords and built-in type names left out: a scan with no parser, as
    an independent reference for ``references``. A template literal's
    ``${…}`` is scanned as code."""
    words = _GO_WORDS if language == "go" else _TS_WORDS
    found: set[tuple[str, int]] = set()
    _scan(text, 0, len(text), 1, language, words, found, nested=False)
    return {(name, line) for name, line in found if 2 <= len(name) and name not in ("nil", "self", "cls")}


def _scan(text, i, end, line, language, words, found, *, nested) -> tuple[int, int]:
    """Scan ``text[i:end]``; returns where it stopped and the line there
    (a nested scan stops at the ``}`` closing its ``${``)."""
    depth, last = 0, ""
    while i < end:
        c = text[i]
        if c == "\n":
            line, i = line + 1, i + 1
        elif c in " \t\r":
            i += 1
        elif text.startswith("//", i):
            i = text.find("\n", i) if text.find("\n", i) != -1 else end
        elif text.startswith("/*", i):
            close = text.find("*/", i + 2)
            close = end if close == -1 else close + 2
            line, i = line + text.count("\n", i, close), close
        elif c in "\"'" or (c == "`" and language == "go"):
            j = i + 1
            while j < end and text[j] != c and not (text[j] == "\n" and c != "`"):
                j += 2 if text[j] == "\\" and c != "`" else 1
            line, i, last = line + text.count("\n", i, j), j + 1, "s"
        elif c == "`":  # a TypeScript template literal
            j = i + 1
            while j < end and text[j] != "`":
                if text[j] == "\\":
                    j += 2
                elif text.startswith("${", j):
                    line += text.count("\n", i, j)
                    j, line = _scan(text, j + 2, end, line, language, words, found, nested=True)
                    i = j
                else:
                    j += 1
            line, i, last = line + text.count("\n", i, j), j + 1, "s"
        elif c == "/" and language != "go" and (last in _REGEX_BEFORE or last in ("return", "typeof")):
            j, klass = i + 1, False
            while j < end and text[j] != "\n" and (text[j] != "/" or klass):
                klass = (klass or text[j] == "[") and text[j] != "]"
                j += 2 if text[j] == "\\" else 1
            i, last = (j if j < end and text[j] == "\n" else j + 1), "r"
            while i < end and text[i].isalpha():
                i += 1
        elif (match := _WORD.match(text, i)) is not None:
            word = match.group()
            if word not in words:
                found.add((word, line))
            i, last = match.end(), word if word in words else "w"
        elif c.isdigit():
            i = re.compile(r"[\w.]+").match(text, i).end()
            last = "n"
        else:
            if nested and c == "{":
                depth += 1
            elif nested and c == "}":
                if depth == 0:
                    return i + 1, line
                depth -= 1
            # ``x! / y``: TypeScript's non-null assertion, not a negation before a regular expression
            i, last = i + 1, ("!x" if c == "!" and last in ("w", ")", "]") else c)
    return i, line
