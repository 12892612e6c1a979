"""Every name the user documents give resolves: ``python -m`` modules, console commands, ``--options`` of the
commands they are written with, Python API names, repository paths and links with their anchors. A name left behind
by a rename or a removal fails here, not on a user's machine. The documents are README.md, docs/*.md, the
benchmark pages, docs/results/runs/README.md and the lab notebooks (docs/notes/): a notebook keeps its figures as
of their date, but a name it gives must still lead somewhere."""
import ast
import glob
import importlib
import os
import re

import pytest

from harness import REPO

DOCS = ([os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
        + sorted(glob.glob(os.path.join(REPO, "docs", "benchmarks", "*.md")))
        + [os.path.join(REPO, "docs", "results", "runs", "README.md"), os.path.join(REPO, "docs", "results.md")]
        + sorted(glob.glob(os.path.join(REPO, "docs", "notes", "*.md"))))
DOCS = sorted(set(DOCS))
#: commands whose options are checked when a line or code span starts with one of them
COMMANDS = re.compile(r"^(?:\S+=\S+\s+)*(?:fairseq-(?:train|generate|interactive|preprocess|validate|hydra-train)|"
                      r"outlayers-[a-z-]+|python3? -m fairseq_outlayers\S*|python3? scripts/\S+|bash scripts/\S+)\b")
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9]*(?:-[a-z0-9]+)*)")


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def code_texts(text):
    """Every fenced code block's lines and every inline code span of the text."""
    out = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M):
        out += re.sub(r"\s*\\\n\s*", " ", block).splitlines()
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    out += re.findall(r"`([^`\n]+)`", prose)
    return out


def _literals(paths):
    """Every ``--option`` string literal (or shell word) of the files, and every dataclass field of fairseq's
    config classes as its option."""
    found = set()
    for path in paths:
        try:
            text = _read(path)
        except (OSError, UnicodeDecodeError):
            continue
        found.update(OPTION.findall(text))
        if path.endswith(".py"):
            found.update("--" + name.replace("_", "-")
                         for name in re.findall(r"^\s+(\w+): [^=\n]+= field\(", text, re.M))
    return found


@pytest.fixture(scope="module")
def known_options():
    import fairseq

    fairseq_dir = os.path.dirname(fairseq.__file__)
    files = glob.glob(os.path.join(fairseq_dir, "**", "*.py"), recursive=True)
    files += glob.glob(os.path.join(REPO, "fairseq_outlayers", "**", "*.py"), recursive=True)
    files += glob.glob(os.path.join(REPO, "scripts", "**", "*.py"), recursive=True)
    files += glob.glob(os.path.join(REPO, "scripts", "**", "*.sh"), recursive=True)
    files += glob.glob(os.path.join(REPO, "tests", "toy_output_layer", "*.py"))  # a --user-dir of architecture.md
    files.append(os.path.join(REPO, "tests", "conftest.py"))  # pytest's options of development.md (--fast)
    example = set()
    for _path, code in example_files().items():  # the options the worked example of architecture.md declares
        example.update(OPTION.findall(code))
        example.update("--" + n.replace("_", "-") for n in re.findall(r"^\s+(\w+): [^=\n]+= field\(", code, re.M))
    return _literals(files) | {"--help"} | set(OTHER_TOOLS) | example


def example_files():
    """{path: text} of the files docs/architecture.md prints for a reader to create (its worked example of a new
    layer, criterion and embeddings); tests/test_adding_a_layer.py creates them in a copy and runs them."""
    from test_adding_a_layer import BLOCK, DOC

    return {path: code for path, code in BLOCK.findall(_read(DOC))}


def example_names():
    """The example's files, and their module names, which do not exist in the repository itself."""
    paths = set(example_files())
    return paths | {p[:-3].replace("/", ".") for p in paths if p.endswith(".py")}


def _package_imports(path):
    """The package's module files that ``path`` imports (``from fairseq_outlayers.x import y``, ``from .x import y``,
    ``import fairseq_outlayers.x``), at the top or inside a function."""
    try:
        tree = ast.parse(_read(path))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return []
    here = os.path.relpath(os.path.dirname(path), REPO).replace(os.sep, ".")
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(here.split(".")[: len(here.split(".")) - node.level + 1] + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            if name.startswith("fairseq_outlayers"):
                rel = os.path.join(REPO, name.replace(".", os.sep))
                found += [f for f in (rel + ".py", os.path.join(rel, "__init__.py"), os.path.join(rel, "__main__.py"))
                          if os.path.isfile(f)]
    return found


def _own_options(files):
    """The options declared by ``files`` and the modules of the tools and the lab they import (one level): a tool's
    own parser and the parsers it adds from the modules it calls (the plugin's readers only name options in their
    messages)."""
    files = [f for f in files if os.path.isfile(f)]
    parsers = (os.path.join(REPO, "fairseq_outlayers", "tools"), os.path.join(REPO, "fairseq_outlayers", "lab"))
    return _literals(set(files) | {g for f in files for g in _package_imports(f) if g.startswith(parsers)}) | {"--help"}


def _console_module(name):
    tree = ast.parse(_read(os.path.join(REPO, "setup.py")))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(name + " = "):
            module = node.value.split(" = ")[1].split(":")[0]
            rel = os.path.join(REPO, module.replace(".", os.sep))
            return rel + ".py" if os.path.isfile(rel + ".py") else os.path.join(rel, "__main__.py")
    return None


#: the fairseq programs and the package's wrappers of them: any option fairseq or the plugin registers
FAIRSEQ_PROGRAMS = re.compile(r"^(?:\S+=\S+\s+)*(?:fairseq-[a-z-]+|outlayers-(?:train|generate|interactive|validate))\b")


def command_options(command, known_options):
    """The options the command starting ``command`` accepts: for fairseq's programs and the package's wrappers of
    them, every option fairseq or the package declares (they depend on --arch, --task, --criterion ...); for a
    console tool of the package, a ``python -m`` module or a script, the options of that tool's own files (a
    shell script that runs fairseq's programs passes theirs on)."""
    words = re.sub(r"^(?:\S+=\S+\s+)+", "", command).split()
    if FAIRSEQ_PROGRAMS.match(command) or not words:
        return known_options
    if words[0].startswith("outlayers-"):
        module = _console_module(words[0])
        return known_options if module is None else _own_options([module])
    if words[0].startswith("python") and words[1:2] == ["-m"] and len(words) > 2:
        rel = os.path.join(REPO, words[2].replace(".", os.sep))
        return _own_options([rel + ".py", os.path.join(rel, "__main__.py")])
    if words[0].startswith("python") and len(words) > 1:
        return _own_options([os.path.join(REPO, words[1])])
    if words[0] == "bash" and len(words) > 1:
        path = os.path.join(REPO, words[1])
        own = _literals([path]) | {"--help"}
        runs_fairseq = os.path.isfile(path) and re.search(r"\bfairseq-(train|generate)\b", _read(path))
        return own | known_options if runs_fairseq else own
    return known_options


def test_every_option_written_with_a_command_exists(known_options):
    """An option in a command line is one that command accepts (``command_options``): a tool's option written
    beside another tool fails, as does an option removed or renamed. A line of several commands (``|``, ``&&``,
    ``;``) is checked command by command; an inline ``--option`` alone must be declared somewhere."""
    bad = []
    cache = {}
    for path in DOCS:
        for line in code_texts(_read(path)):
            line = line.strip()
            if line.startswith("--"):
                segments = [(line, known_options)]
            else:
                segments = []
                for part in re.split(r"\s*(?:\|\|?|&&|;)\s*", line):
                    if COMMANDS.match(part):
                        key = " ".join(re.sub(r"^(?:\S+=\S+\s+)+", "", part).split()[:3])
                        if key not in cache:
                            cache[key] = command_options(part, known_options)
                        segments.append((part, cache[key]))
            for part, accepted in segments:
                for option in OPTION.findall(part.split(" #")[0]):
                    if option not in accepted:
                        bad.append(f"{os.path.relpath(path, REPO)}: {option} (in `{part[:80]}`)")
    assert not bad, "options the command does not accept:\n" + "\n".join(sorted(set(bad)))


def console_scripts():
    tree = ast.parse(_read(os.path.join(REPO, "setup.py")))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.match(r"^outlayers-[\w-]+ = ", node.value):
            names.add(node.value.split(" = ")[0])
    return names


def test_every_console_command_is_installed():
    scripts = console_scripts()
    assert "outlayers-pairing" in scripts and "outlayers-options" in scripts
    bad = []
    for path in DOCS:
        for name in set(re.findall(r"(?<![\w./-])(outlayers-[a-z]+(?:-[a-z]+)*)\b", _read(path))):
            if name not in scripts and not name.startswith("outlayers-allow"):
                bad.append(f"{os.path.relpath(path, REPO)}: {name}")
    assert not bad, "commands setup.py does not install:\n" + "\n".join(sorted(bad))


def resolves(name):
    """``fairseq_outlayers.a.b.c`` is a module, or an attribute of the longest module prefix that imports."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_every_python_name_resolves():
    """Module paths and API names (``fairseq_outlayers.tools.pairing.make_pairing``) written in the documents
    import; ``python -m`` modules are runnable (a ``__main__.py`` or a ``__main__`` guard)."""
    bad = []
    planned = example_names()
    for path in DOCS:
        text = _read(path)
        for name in set(re.findall(r"\b(fairseq_outlayers(?:\.[A-Za-z_]\w*)+)", text)):
            name = name.rstrip(".")
            if name in planned:
                continue
            if name.endswith((".py", ".md")) or not resolves(name):
                if not os.path.exists(os.path.join(REPO, name.replace(".", os.sep)[: -3] + ".py")):
                    bad.append(f"{os.path.relpath(path, REPO)}: {name}")
        for module in set(re.findall(r"-m\s+(fairseq_outlayers(?:\.\w+)*)", text)):
            rel = os.path.join(REPO, module.replace(".", os.sep))
            main = os.path.isfile(os.path.join(rel, "__main__.py")) or (
                os.path.isfile(rel + ".py") and "__name__ == \"__main__\"" in _read(rel + ".py"))
            if not main:
                bad.append(f"{os.path.relpath(path, REPO)}: python -m {module} cannot run")
    assert not bad, "names that do not resolve:\n" + "\n".join(sorted(bad))


#: options after which a path is a file the command writes, not one the repository has
WRITTEN = {"--output", "--out", "-o", ">", "--save-dir", "--results-path"}
#: files of fairseq's own repository that the documents name (its test suite, run with the plugin)
FAIRSEQ_FILES = {"tests/test_sequence_generator.py", "scripts/average_checkpoints.py"}
#: options of other tools written inline in the documents
OTHER_TOOLS = {"--durations": "pytest", "--randomly-seed": "pytest-randomly"}


def _placeholder(path):
    return any(c in path for c in "<>{}$") or "..." in path or re.search(r"[A-Z]{3,}", path)


def test_every_repository_path_exists():
    """Paths of the repository written in code spans (``scripts/x.py``, ``configs/...``, ``docs/...``) exist
    (a glob matches something); placeholders (``ROW``, ``<dataset>``, ``{tgt}``) are left alone."""
    bad = []
    planned = example_names()
    roots = ("scripts/", "configs/", "fairseq_outlayers/", "tests/", "docs/")
    for path in DOCS:
        for span in code_texts(_read(path)):
            words = span.split()
            for before, word in zip([""] + words, words):
                word = word.strip("\"'(),;:").split("::")[0]  # a pytest node id names its file
                if (not word.startswith(roots) or _placeholder(word) or before in WRITTEN
                        or word in FAIRSEQ_FILES or word in planned):
                    continue
                if not glob.glob(os.path.join(REPO, word)):
                    bad.append(f"{os.path.relpath(path, REPO)}: {word}")
    assert not bad, "paths the repository does not have:\n" + "\n".join(sorted(set(bad)))


def slugs(text):
    """GitHub's anchors of a Markdown text's headings."""
    out, seen = set(), {}
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_every_link_and_anchor_resolves():
    bad = []
    for path in DOCS:
        text = _read(path)
        prose = re.sub(r"`[^`\n]*`", "", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M))
        for target in re.findall(r"\]\(([^)\s]+)\)", prose):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            where = f"{os.path.relpath(path, REPO)}: ({target})"
            if not os.path.exists(dest):
                bad.append(where + " no such file")
            elif anchor and dest.endswith(".md") and anchor not in slugs(_read(dest)):
                bad.append(where + " no such heading")
    assert not bad, "links that do not resolve:\n" + "\n".join(sorted(bad))


def test_the_checks_themselves():
    """A name that moved, an option nobody declares, a heading that is not there: each is caught."""
    assert not resolves("fairseq_outlayers.pairing.make_pairing")
    assert resolves("fairseq_outlayers.tools.pairing.make_pairing") and resolves("fairseq_outlayers.lab.ledger")
    assert "the-results-ledger-converged-runs" in slugs("## The results ledger (converged runs)\n")
    assert "what-it-does-1" in slugs("## What it does\n## What it does\n")
    assert COMMANDS.match("fairseq-train DATA --output-layer joint") and COMMANDS.match("OMP_NUM_THREADS=1 python scripts/x.py")
    assert not COMMANDS.match("pip install --no-build-isolation fastBPE")
    assert OPTION.findall("outlayers-pairing --src-text a -o b --aligner=pharaoh") == ["--src-text", "--aligner"]
    assert code_texts("a `--x` b\n```bash\nfairseq-train \\\n    --y 1\n```\n") == ["fairseq-train --y 1", "--x"]
    # options are the command's own: outlayers-pairing has --src-text, outlayers-vectors has not
    known = {"--src-text", "--min-coverage", "--arch"}
    assert "--src-text" in command_options("outlayers-pairing --src-text a", known)
    assert "--src-text" not in command_options("outlayers-vectors report D V --src-text a", known)
    assert "--min-coverage" in command_options("outlayers-vectors report D V --min-coverage 0.5", known)
    assert command_options("fairseq-train DATA --arch x", known) is known
