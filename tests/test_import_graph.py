"""The package is three parts with one-way arrows: the plugin (what ``--user-dir`` loads: ``fairseq_outlayers``
without ``tools/`` and ``lab/``) <- the tools (``fairseq_outlayers.tools``) <- the lab (``fairseq_outlayers.lab``).
Every import of the package's own modules is read from the source (top level and inside functions), so a lazy
import that runs upward is caught too; and loading the plugin in a fresh interpreter imports no tool and no lab
module."""
import ast
import os
import subprocess
import sys

from harness import REPO

PACKAGE = os.path.join(REPO, "fairseq_outlayers")
#: rank of each part: an import may only go to the same or a lower rank
RANKS = {"plugin": 0, "tools": 1, "lab": 2}


def part(module: str) -> str:
    name = module.split(".")
    if len(name) > 1 and name[1] in ("tools", "lab"):
        return name[1]
    if name[-1] == "__main__" and len(name) == 2:  # ``python -m fairseq_outlayers``: the tools' front door
        return "tools"
    return "plugin"


def module_name(path: str) -> str:
    rel = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
    return rel[: -len(".__init__")] if rel.endswith(".__init__") else rel


def imports(path: str, module: str):
    """(line, imported module) for every import of a ``fairseq_outlayers`` module in the file."""
    package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [f"{target}.{a.name}" for a in node.names]
            for name in names if target.split(".")[0] == "fairseq_outlayers" else []:
                # ``from fairseq_outlayers.lab import compare`` imports fairseq_outlayers.lab.compare
                yield node.lineno, name
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "fairseq_outlayers":
                    yield node.lineno, a.name


def package_files():
    for root, _dirs, files in os.walk(PACKAGE):
        for f in sorted(files):
            if f.endswith(".py"):
                yield os.path.join(root, f)


def test_no_import_runs_from_a_lower_part_to_a_higher_one():
    upward = []
    for path in package_files():
        module = module_name(path)
        for line, target in imports(path, module):
            if RANKS[part(target)] > RANKS[part(module)]:
                upward.append(f"{os.path.relpath(path, REPO)}:{line} ({part(module)}) imports {target} "
                              f"({part(target)})")
    assert not upward, "imports against the arrows plugin <- tools <- lab:\n" + "\n".join(upward)


def test_every_module_belongs_to_a_part_the_folders_show():
    names = {module_name(p) for p in package_files()}
    assert {part(n) for n in names} == {"plugin", "tools", "lab"}
    assert part("fairseq_outlayers.tools.pairing.lexicon") == "tools"
    assert part("fairseq_outlayers.lab.ledger.runner") == "lab"
    assert part("fairseq_outlayers.word_pairs.pairs") == "plugin"  # the file format the model reads
    assert part("fairseq_outlayers.target_vectors") == "plugin"


def test_loading_the_plugin_imports_no_tool_and_no_lab_module():
    probe = ("import sys, fairseq_outlayers\n"
             "print(sorted(m for m in sys.modules if m.startswith(('fairseq_outlayers.tools', 'fairseq_outlayers.lab'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_every_module_command_written_in_the_repository_runs():
    """``python -m fairseq_outlayers.X`` written in a script, the Makefile, a document or an error message names a
    module that ``python -m`` can run (a package with ``__main__.py`` or a module with a ``__main__`` guard): a
    command left behind by a move fails here, not on a user's machine."""
    import re

    pattern = re.compile(r"-m\s+\"?\s*(fairseq_outlayers(?:\.[A-Za-z_][A-Za-z0-9_]*)*)")
    skip = {".venv", "work", ".git", "runs", "expected"}  # records keep the commands they were made with
    # this file, and the ledger's tables (rendered from the records' descriptions)
    left_out = {os.path.abspath(__file__), os.path.join(REPO, "docs", "results", "ledger.md")}
    found = {}
    for top, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in skip and not d.startswith(".")]
        for name in files:
            if (not name.endswith((".py", ".sh", ".md", ".args", ".yaml")) and name != "Makefile"
                    or os.path.join(top, name) in left_out):
                continue
            path = os.path.join(top, name)
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            # a message split over two string literals: "... python -m " "fairseq_outlayers.x ..."
            text = re.sub(r"-m\s*\"\s*\n\s*f?\"", "-m ", text)
            for m in pattern.finditer(text):
                found.setdefault(m.group(1).rstrip("."), f"{os.path.relpath(path, REPO)}:"
                                 f"{text[:m.start()].count(chr(10)) + 1}")
    assert "fairseq_outlayers.lab.ledger" in found and "fairseq_outlayers.tools.pairing" in found
    broken = []
    for module, where in sorted(found.items()):
        rel = module.replace(".", os.sep)
        package_main = os.path.join(REPO, rel, "__main__.py")
        single = os.path.join(REPO, rel + ".py")
        runnable = os.path.isfile(package_main) or (
            os.path.isfile(single) and "__name__ == \"__main__\"" in open(single, encoding="utf-8").read())
        if not runnable:
            broken.append(f"{where}: python -m {module} cannot run")
    assert not broken, "\n".join(broken)


def test_no_tool_imports_inside_a_function_what_the_plugin_has_loaded():
    """Every tool is a module of the package, so ``import fairseq_outlayers`` (which registers the models: torch,
    fairseq and the plugin's modules) runs before any line of it: no tool can run without torch, and a tool's
    import of a module the plugin loads belongs at the top of its file, where a function-level one saves nothing."""
    probe = ("import sys, fairseq_outlayers\n"
             "print(' '.join(sorted(m for m in sys.modules if m.startswith('fairseq_outlayers'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    loaded = set(out.stdout.strip().splitlines()[-1].split()) - {"fairseq_outlayers"}
    assert {"fairseq_outlayers.models.registry", "fairseq_outlayers.outfiles", "fairseq_outlayers.errors"} <= loaded
    late = []
    for path in package_files():
        module = module_name(path)
        if part(module) != "tools":
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        inner = {n.lineno for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))}
        for line, target in imports(path, module):
            rel = os.path.join(REPO, *target.split("."))
            is_module = os.path.isfile(rel + ".py") or os.path.isdir(rel)
            named = target if is_module else target.rsplit(".", 1)[0]  # ``from MODULE import NAME``
            if line in inner and (named in loaded or target == "fairseq_outlayers"):
                late.append(f"{os.path.relpath(path, REPO)}:{line} imports {target} inside a function")
    assert not late, "loaded with the package already; import at the top of the file:\n" + "\n".join(late)
