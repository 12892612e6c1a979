"""The package is three parts with one-way arrows: the plugin (what ``--user-dir`` loads: ``fairseq_outlayers``
without ``tools/`` and ``lab/``) <- the tools (``fairseq_outlayers.tools``) <- the lab (``fairseq_outlayers.lab``).
Every import of the package's own modules is read from the source (top level and inside functions), so a lazy
import that runs upward is caught too; and loading the plugin in a fresh interpreter imports no tool and no lab
module."""
import ast
import functools
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


def parse(path: str) -> ast.Module:
    """The file's syntax tree, parsed once a session for each version of the file (its tests walk the package's
    imports once for every module)."""
    stat = os.stat(path)
    return _parse(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=None)
def _parse(path: str, _mtime: int, _size: int) -> ast.Module:
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), path)


def module_name(path: str) -> str:
    rel = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
    return rel[: -len(".__init__")] if rel.endswith(".__init__") else rel


def imports(path: str, module: str, packages: bool = False):
    """(line, imported module) for every import of a module of the package (``module``'s root) in the file; with
    ``packages``, also the module a ``from M import N`` names (M)."""
    package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
    tree = parse(path)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] * packages + [f"{target}.{a.name}" for a in node.names]
            for name in names if target.split(".")[0] == module.split(".")[0] else []:
                # ``from fairseq_outlayers.lab import compare`` imports fairseq_outlayers.lab.compare
                yield node.lineno, name
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == module.split(".")[0]:
                    yield node.lineno, a.name


def package_files(package=PACKAGE):
    for root, _dirs, files in os.walk(package):
        for f in sorted(files):
            if f.endswith(".py"):
                yield os.path.join(root, f)


def import_graph(package=PACKAGE, repo=REPO):
    """{module: the package modules it imports}, at the top or inside a function. A package is its ``__init__``:
    ``from P import name`` imports the module P.name when it is one, else P itself; importing P.M also runs the
    ``__init__`` of every package above M, and those edges are kept (a circle through an ``__init__`` is one)."""
    files = {}
    for path in package_files(package):
        rel = os.path.relpath(path, repo)[:-3].replace(os.sep, ".")
        files[rel[: -len(".__init__")] if rel.endswith(".__init__") else rel] = path
    graph = {}
    for module, path in files.items():
        targets = set()
        for _line, target in imports(path, module, packages=True):
            name = target if target in files else target.rsplit(".", 1)[0]
            if name not in files:
                continue
            parts = name.split(".")
            targets.update(".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in files)
        targets.discard(module)
        graph[module] = targets - {p for p in _parents(module)}  # a module's own parents are loaded before it
    return graph


def _parents(module):
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def circles(graph):
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_in_the_package():
    found = circles(import_graph())
    assert not found, "modules that import each other (top level or inside a function):\n" + "\n".join(
        " <-> ".join(c) for c in found)


def test_the_circle_test_sees_a_circle_through_a_package_init(tmp_path):
    """A planted circle: pkg/a.py imports pkg.sub (its __init__), whose __init__ imports pkg.a inside a function."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import sub\n")
    (pkg / "sub" / "__init__.py").write_text("def f():\n    from .. import a\n")
    (pkg / "sub" / "leaf.py").write_text("from pkg.sub import x\n")
    graph = import_graph(str(pkg), str(tmp_path))
    assert circles(graph) == [["pkg.a", "pkg.sub"]], graph


#: the plugin's floors, from the ground up: a module imports only from its own floor or a lower one, and a method
#: folder imports no other method's folder
FLOORS = (("base", ("fairseq_outlayers", "fairseq_outlayers.version", "fairseq_outlayers.errors",
                    "fairseq_outlayers.value_checks", "fairseq_outlayers.outfiles", "fairseq_outlayers.model_args",
                    "fairseq_outlayers.parameter_counts")),
          ("core", ("fairseq_outlayers.core",)),
          ("losses", ("fairseq_outlayers.losses",)),
          ("methods", ("fairseq_outlayers.methods",)),
          ("models", ("fairseq_outlayers.models",)),
          ("tools", ("fairseq_outlayers.tools", "fairseq_outlayers.__main__")),
          ("lab", ("fairseq_outlayers.lab",)))


def floor(module):
    best = None
    for rank, (_name, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (rank, len(prefix))
    return best[0]


def test_no_arrow_runs_back_up_and_no_method_imports_another():
    graph = import_graph()
    up, across = [], []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            if floor(target) > floor(module):
                up.append(f"{module} ({FLOORS[floor(module)][0]}) imports {target} ({FLOORS[floor(target)][0]})")
            own, their = module.split("."), target.split(".")
            if own[1:2] == their[1:2] == ["methods"] and len(own) > 2 and len(their) > 2 and own[2] != their[2]:
                across.append(f"{module} imports {target}")
    assert not up, "imports that run back up the floors:\n" + "\n".join(up)
    assert not across, "a method's folder imports another method's:\n" + "\n".join(across)


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
    assert part("fairseq_outlayers.methods.shared_private.word_pairs.pairs") == "plugin"  # the file format the model reads
    assert part("fairseq_outlayers.methods.continuous.target_vectors") == "plugin"


def test_loading_the_plugin_imports_no_tool_and_no_lab_module():
    probe = ("import sys, fairseq_outlayers.models\n"
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


def top_level_imports(path: str, module: str):
    """The package modules a file imports when it is loaded (imports outside any function), and the lines of the
    imports inside functions."""
    stat = os.stat(path)
    return _top_level_imports(path, module, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=None)
def _top_level_imports(path: str, module: str, _mtime: int, _size: int):
    tree = parse(path)
    inner = {n.lineno for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
             for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return [(line, target) for line, target in imports(path, module) if line not in inner], inner


def as_module(target: str):
    """``target`` as a module of the package (``from M import NAME`` names M), or None when it is none."""
    for name in (target, target.rsplit(".", 1)[0]):
        rel = os.path.join(REPO, *name.split("."))
        if os.path.isfile(rel + ".py") or os.path.isdir(rel):
            return name
    return None


def loads(names) -> set:
    """Every package module that importing ``names`` loads: their parents, their top-level imports, and for
    ``fairseq_outlayers.models`` (which imports every method's ``register`` and the shared criterions by name) all of those files."""
    files = {module_name(p): p for p in package_files()}
    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in seen or name not in files:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        if name == "fairseq_outlayers.models":
            todo += [m for m in files if m.startswith(("fairseq_outlayers.models.", "fairseq_outlayers.losses."))
                     or m.endswith(".register")]
        todo += [m for _line, t in top_level_imports(files[name], name)[0] if (m := as_module(t))]
    return seen


def test_no_tool_or_lab_module_imports_inside_a_function_what_it_has_loaded_already():
    """A tool's or lab module's function-level import of a module its top-level imports load already saves nothing: it belongs at
    the top of the file. A lazy import that keeps torch or a heavy tool out of a light command stays."""
    late = []
    for path in package_files():
        module = module_name(path)
        if part(module) == "plugin":
            continue
        top, inner = top_level_imports(path, module)
        loaded = loads([module])
        for line, target in imports(path, module):
            named = as_module(target)
            if line in inner and named in loaded:
                late.append(f"{os.path.relpath(path, REPO)}:{line} imports {target} inside a function")
    assert not late, "loaded by the file's own imports already; import at the top of the file:\n" + "\n".join(late)


def imports_torch_or_fairseq(path: str) -> bool:
    tree = parse(path)
    inner = {n.lineno for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
             for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))}
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) and n.lineno not in inner for a in n.names]
    names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and not n.level
              and n.lineno not in inner]
    return any(name.split(".")[0] in ("torch", "fairseq", "fairseq_cli") for name in names)


LIGHT = ("fairseq_outlayers", "fairseq_outlayers.tools.corpus_tools", "fairseq_outlayers.tools.check_parallel",
         "fairseq_outlayers.outfiles", "fairseq_outlayers.errors")


def test_the_package_and_the_recipes_text_tools_load_neither_torch_nor_fairseq():
    """``import fairseq_outlayers`` is the standard library only, and so are the text tools the preparation
    scripts start many times; every tool or lab module whose imports reach no plugin model stays as light."""
    heavy = {module_name(p) for p in package_files() if imports_torch_or_fairseq(p)} | {"fairseq_outlayers.models"}
    light = [m for m in map(module_name, package_files())
             if part(m) != "plugin" and not m.endswith("__main__") and not loads([m]) & heavy]
    assert set(LIGHT[1:3]) <= set(light), light
    probe = ("import importlib, sys\n"
             f"for m in {sorted(set(LIGHT) | set(light))!r}:\n"
             "    importlib.import_module(m)\n"
             "    assert not {'torch', 'fairseq'} & set(sys.modules), m + ' loads ' + ' '.join(\n"
             "        sorted({'torch', 'fairseq'} & set(sys.modules)))\n"
             "print('ok')")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


#: function-level imports of the standard library that stay, with their reason
LAZY_STDLIB = {}


def test_no_function_imports_the_standard_library():
    """A module of the standard library is imported at the top of the file: inside a function it saves nothing
    (``LAZY_STDLIB`` names any that stays, with its reason)."""
    late = []
    for path in package_files():
        tree = parse(path)
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module else [])
                for name in names:
                    rel = os.path.relpath(path, REPO)
                    if name.split(".")[0] in sys.stdlib_module_names and (rel, name) not in LAZY_STDLIB:
                        late.append(f"{rel}:{node.lineno} imports {name} inside {fn.name}")
    assert not late, "import the standard library at the top of the file:\n" + "\n".join(late)
