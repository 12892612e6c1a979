"""fairseq checkpoints load under torch's weights-only unpickler; a pickle that would run code is refused."""
import os
import pickle
import random
import sys

import pytest
import torch

from fairseq_outlayers.core.checkpoint_safety import ALLOWED_GLOBALS
from harness import generate, run, train


class _RunsCode:
    """Unpickling this calls os.system: the classic malicious-checkpoint payload."""

    def __reduce__(self):
        return (os.system, ("touch /tmp/outlayers-pwned",))


def test_checkpoint_needs_only_allow_listed_globals(tiny_bin, tmp_path):
    save = str(tmp_path / "ckpt")
    train(tiny_bin, save, extra=["--output-layer", "tied"], max_update=2)
    path = os.path.join(save, "checkpoint_last.pt")
    # ask a fresh interpreter that has not imported the plugin (this one has already allow-listed the classes):
    # a new Python (``python -c`` always is one)
    probe = run([sys.executable, "-c", "import sys, torch; print('\\n'.join("
                 "torch.serialization.get_unsafe_globals_in_checkpoint(sys.argv[1])))", path],
                env={"OUTLAYERS_TEST_SUBPROCESS": "1"})
    needed = set(probe.stdout.split())
    allowed = {f"{c.__module__}.{c.__qualname__}" for c in ALLOWED_GLOBALS}
    assert needed == {"argparse.Namespace"} and needed <= allowed
    # and fairseq-generate loads it with no TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD in the environment (harness.run)
    _, hyps = generate(tiny_bin, path)
    assert len(hyps) == 24


def test_crafted_checkpoint_is_refused(tmp_path):
    marker = "/tmp/outlayers-pwned"
    if os.path.exists(marker):
        os.remove(marker)
    path = str(tmp_path / "evil.pt")
    torch.save({"model": {}, "payload": _RunsCode()}, path)
    with pytest.raises(pickle.UnpicklingError, match="os.system|posix.system|Unsupported global"):
        torch.load(path, map_location="cpu")
    from fairseq import checkpoint_utils

    with pytest.raises(pickle.UnpicklingError):
        checkpoint_utils.load_checkpoint_to_cpu(path)
    assert not os.path.exists(marker)


def test_weights_only_stays_on_globally():
    assert os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD") in (None, "", "0")
    path = os.path.join(os.path.dirname(__file__), "..", "fairseq_outlayers", "core", "checkpoint_safety.py")
    assert "weights_only=False" not in open(path).read()


# --- every load of the package is safe, and every entry point says in one line what is wrong with a checkpoint ---

SOURCES = ("fairseq_outlayers", "scripts")


def _torch_load_calls():
    """(file, line, weights_only keyword or None) of every ``torch.load(...)`` call in the package and its
    scripts."""
    import ast

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for top in SOURCES:
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read(), path)
                for node in ast.walk(tree):
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                            node.func.attr == "load" and getattr(node.func.value, "id", None) == "torch":
                        keyword = next((k.value for k in node.keywords if k.arg == "weights_only"), None)
                        yield os.path.relpath(path, root), node.lineno, keyword


def test_no_unsafe_unpickling_in_the_package_or_its_scripts():
    calls = list(_torch_load_calls())
    assert calls, "the scan found no torch.load at all: it is looking in the wrong place"
    unsafe = [f"{path}:{line}" for path, line, keyword in calls
              if not (isinstance(keyword, __import__("ast").Constant) and keyword.value is True)]
    assert not unsafe, f"torch.load without weights_only=True: {unsafe}"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for top in SOURCES:
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in (n for n in files if n.endswith((".py", ".sh"))):
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    assert "weights_only=False" not in f.read(), os.path.join(folder, name)


@pytest.fixture(scope="module")
def bad_checkpoints(tmp_path_factory, tiny_bin):
    """A trained tiny checkpoint and its damaged, crafted and missing variants."""
    folder = tmp_path_factory.mktemp("bad_ckpt")
    save = str(folder / "good")
    train(tiny_bin, save, extra=["--output-layer", "tied"], max_update=1)
    good = os.path.join(save, "checkpoint_last.pt")
    with open(good, "rb") as f:
        data = f.read()
    paths = {"good": good}
    # seeded: about 7 % of random byte strings fail as IndexError, KeyError or UnicodeDecodeError, not as
    # UnpicklingError (each still one line: test_random_bytes_fail_in_one_line)
    random_bytes = random.Random(0).randbytes(4096)
    for kind, content in (("truncated", data[:len(data) // 3]), ("empty", b""), ("random", random_bytes)):
        paths[kind] = str(folder / f"{kind}.pt")
        with open(paths[kind], "wb") as f:
            f.write(content)
    paths["crafted"] = str(folder / "crafted.pt")
    torch.save({"model": {}, "cfg": {}, "payload": _RunsCode()}, paths["crafted"])
    paths["missing"] = str(folder / "missing.pt")
    paths["not a checkpoint"] = str(folder / "tensor.pt")
    torch.save({"weights": torch.zeros(2)}, paths["not a checkpoint"])
    return paths


MESSAGES = {
    "truncated": "cannot be read (RuntimeError: PytorchStreamReader failed reading zip archive",
    "empty": "is empty (0 bytes)",
    "random": "cannot be read (UnpicklingError",
    "crafted": "was refused and nothing in it was run: its pickle asks for 'posix.system'",
    "missing": "does not exist",
    "not a checkpoint": "not a fairseq checkpoint",
}


@pytest.mark.parametrize("kind", sorted(MESSAGES))
def test_read_says_what_is_wrong_in_one_line(bad_checkpoints, kind):
    from fairseq_outlayers.core.checkpoint_safety import read
    from fairseq_outlayers.errors import OutlayersConfigError

    marker = "/tmp/outlayers-pwned"
    if os.path.exists(marker):
        os.remove(marker)
    with pytest.raises(OutlayersConfigError) as e:
        read(bad_checkpoints[kind], mmap=True)
    assert MESSAGES[kind] in str(e.value) and bad_checkpoints[kind] in str(e.value) and "\n" not in str(e.value)
    assert not os.path.exists(marker)
    assert read(bad_checkpoints["good"])["model"]


def test_random_bytes_fail_in_one_line(tmp_path):
    """Whatever the unpickler trips on in random bytes (UnpicklingError mostly; IndexError, KeyError,
    UnicodeDecodeError sometimes), the error is one line that names the file."""
    from fairseq_outlayers.core.checkpoint_safety import read
    from fairseq_outlayers.errors import OutlayersConfigError

    gen = random.Random(1)
    for i in range(60):
        path = str(tmp_path / f"random{i}.pt")
        with open(path, "wb") as f:
            f.write(gen.randbytes(4096))
        with pytest.raises(OutlayersConfigError) as e:
            read(path, mmap=True)
        assert f"checkpoint '{path}' cannot be read (" in str(e.value) and "\n" not in str(e.value)


# Every entry point that loads a checkpoint, run in one interpreter (fairseq is imported once): {name: argv}, with
# CKPT for the checkpoint, DATA for the data directory and OUT for a fresh output path.
ENTRY_POINTS = {
    "outlayers-generate": ("fairseq_outlayers.tools.wrappers:generate", ["DATA", "--path", "CKPT", "--cpu"]),
    "outlayers-interactive": ("fairseq_outlayers.tools.wrappers:interactive", ["DATA", "--path", "CKPT", "--cpu"]),
    "outlayers-validate": ("fairseq_outlayers.tools.wrappers:validate", ["DATA", "--path", "CKPT", "--cpu"]),
    "outlayers-train --restore-file": ("fairseq_outlayers.tools.wrappers:train", [
        "DATA", "--arch", "outlayers_transformer", "--restore-file", "CKPT", "--save-dir", "OUT", "--cpu",
        "--optimizer", "adam", "--lr", "0.001", "--max-tokens", "500", "--max-update", "1"]),
    "outlayers-train --finetune-from-model": ("fairseq_outlayers.tools.wrappers:train", [
        "DATA", "--arch", "outlayers_transformer", "--finetune-from-model", "CKPT", "--save-dir", "OUT", "--cpu",
        "--optimizer", "adam", "--lr", "0.001", "--max-tokens", "500", "--max-update", "1"]),
    "outlayers-fit-bias": ("fairseq_outlayers.tools.fit_bias:main", ["CKPT", "--out", "OUT"]),
    "outlayers-params": ("fairseq_outlayers.tools.params:main", ["CKPT"]),
    "outlayers-vectors export": ("fairseq_outlayers.tools.vectors:main", ["export", "CKPT", "OUT"]),
    "scripts/probe_output_bias.py": ("scripts/probe_output_bias.py", ["CKPT", "--out-checkpoint", "OUT"]),
    "scripts/joint_neighbours.py": ("scripts/joint_neighbours.py", ["--path", "CKPT", "--words", "w1"]),
    "scripts/shared_private_pca.py": ("scripts/shared_private_pca.py", ["CKPT", "-o", "OUT.svg"]),
    "scripts/analyse_norm_frequency.py": ("scripts/analyse_norm_frequency.py", ["CKPT", "DATA/dict.en.txt",
                                                                                "--plot", "OUT.png"]),
}

_DRIVER = r'''
import contextlib, io, importlib, json, os, runpy, sys
results = {}
for name, (target, argv) in json.loads(sys.argv[1]).items():
    err = io.StringIO()
    code = 0
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            if target.endswith(".py"):
                sys.argv = [target] + argv
                runpy.run_path(target, run_name="__main__")
            else:
                module, func = target.split(":")
                sys.argv = [name] + argv
                result = getattr(importlib.import_module(module), func)(*(() if "wrappers" in module else (argv,)))
                code = result if isinstance(result, int) else 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
            if not isinstance(e.code, int) and e.code is not None:
                err.write(str(e.code) + "\n")
        except BaseException as e:
            code = "traceback"
            err.write(f"{type(e).__name__}: {e}\n")
    lines = [l for l in err.getvalue().splitlines() if l.strip() and " | INFO | " not in l and "Warning" not in l
             and not l.startswith(" ")]
    results[name] = [code, lines[-1] if lines else ""]
print(json.dumps(results))
'''


#: the damaged checkpoints every entry point is given, all in one run of the driver (one start of fairseq)
REFUSED_KINDS = ["crafted", "truncated", "missing"]


def test_every_entry_point_refuses_a_bad_checkpoint_in_one_line(bad_checkpoints, tiny_bin, tmp_path):
    import json

    marker = "/tmp/outlayers-pwned"
    if os.path.exists(marker):
        os.remove(marker)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    jobs = {}
    for kind in REFUSED_KINDS:
        for i, (name, (target, argv)) in enumerate(ENTRY_POINTS.items()):
            out = str(tmp_path / f"out-{kind}-{i}")
            argv = [a.replace("CKPT", bad_checkpoints[kind]).replace("DATA", tiny_bin).replace("OUT", out)
                    for a in argv]
            jobs[f"{kind}: {name}"] = (os.path.join(repo, target) if target.endswith(".py") else target, argv)
    proc = run([sys.executable, "-c", _DRIVER, json.dumps(jobs)], cwd=str(tmp_path), input="")
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(results) == sorted(jobs)
    for job, (code, line) in results.items():
        kind = job.split(":")[0]
        assert code not in (0, "traceback"), (job, code, line)
        assert MESSAGES[kind] in line and bad_checkpoints[kind] in line, (job, line)
    assert not os.path.exists(marker)
    assert not [p for p in os.listdir(tmp_path) if p.startswith("out") and os.path.isfile(tmp_path / p)]


def test_outlayers_validate_needs_no_task_or_batch_size(bad_checkpoints, tiny_bin):
    """fairseq-validate has no default task (KeyError: None) and asserts a batch size; outlayers-validate takes
    fairseq-generate's defaults (translation, 12,000 tokens) as outlayers-generate does."""
    from harness import tool

    proc = run([tool("outlayers-validate"), tiny_bin, "--path", bad_checkpoints["good"], "--cpu"])
    assert "valid on 'valid' subset | loss" in proc.stdout + proc.stderr
