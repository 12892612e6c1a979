"""Every name the user documents give resolves: ``python -m`` modules, console commands, ``--options`` of the
commands they are written with, Python API names, repository paths and links with their anchors. A name left behind
by a rename or a removal fails here, not on a user's machine. The documents are README.md, docs/*.md, the
benchmark pages and docs/results/runs/README.md; the lab notebooks (docs/notes/) keep the names of their date."""
import ast
import glob
import importlib
import os
import re

import pytest

from harness import REPO

DOCS = ([os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
        + sorted(glob.glob(os.path.join(REPO, "docs", "benchmarks", "*.md")))
        + [os.path.join(REPO, "docs", "results", "runs", "README.md"), os.path.join(REPO, "docs", "results.md")])
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


def test_every_option_written_with_a_command_exists(known_options):
    """An option in a command line of the package, fairseq or a script, or an inline ``--option``, is declared by
    fairseq, the package or the script (an option removed or renamed fails here)."""
    bad = []
    for path in DOCS:
        for line in code_texts(_read(path)):
            line = line.strip()
            if not (COMMANDS.match(line) or line.startswith("--")):
                continue
            for option in OPTION.findall(line):
                if option not in known_options:
                    bad.append(f"{os.path.relpath(path, REPO)}: {option} (in `{line[:80]}`)")
    assert not bad, "options no code declares:\n" + "\n".join(sorted(set(bad)))


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
FAIRSEQ_FILES = {"tests/test_sequence_generator.py"}
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
    for path in DOCS + sorted(glob.glob(os.path.join(REPO, "docs", "notes", "*.md"))):
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
            elif anchor and dest.endswith(".md") and "/notes/" not in path and anchor not in slugs(_read(dest)):
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
