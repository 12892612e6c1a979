"""Loading the package as ``--user-dir`` does (fairseq's ``import_user_module``: the package, then its ``models/``)
registers fairseq components and allow-lists the one class
fairseq checkpoints need for torch's safe loading (``checkpoint_safety.ALLOWED_GLOBALS``: ``argparse.Namespace`` and,
for ``--eval-bleu`` checkpoints, numeric numpy arrays); it changes nothing else: no ``sys.excepthook``, no fairseq
function replaced, no attribute of a fairseq/torch module rebound, no thread, logging, warning or environment
setting. Checked in a fresh interpreter, where nothing has imported the package yet."""
import json
import os
import subprocess
import sys
import textwrap

from harness import REPO

PROBE = textwrap.dedent("""
    import json, logging, os, sys, types, warnings
    import torch
    import fairseq, fairseq.utils, fairseq.models, fairseq.criterions, fairseq.tasks, fairseq.checkpoint_utils
    import fairseq.sequence_generator

    def module_attributes():
        out = {}
        for name, module in list(sys.modules.items()):
            if isinstance(module, types.ModuleType) and name.split(".")[0] in ("fairseq", "fairseq_cli", "torch", "sys"):
                try:
                    out[name] = {k: id(v) for k, v in vars(module).items() if not k.startswith("__")}
                except TypeError:
                    pass
        return out

    def state():
        return {"threads": [torch.get_num_threads(), torch.get_num_interop_threads()],
                "dtype": str(torch.get_default_dtype()), "warnings": len(warnings.filters),
                "root_handlers": len(logging.getLogger().handlers), "root_level": logging.getLogger().level,
                "environ": dict(os.environ), "path": [p for p in sys.path if p != os.path.dirname(os.environ["OUTLAYERS_USER_DIR"])]}

    hooks = (sys.excepthook, sys.displayhook)
    functions = (fairseq.utils.post_process_prediction, fairseq.utils.load_align_dict, fairseq.utils.replace_unk)
    safe = set(map(repr, torch.serialization.get_safe_globals()))
    before, attributes = state(), module_attributes()

    import argparse
    fairseq.utils.import_user_module(argparse.Namespace(user_dir=os.environ["OUTLAYERS_USER_DIR"]))
    import fairseq_outlayers

    after, attributes_after = state(), module_attributes()
    rebound = sorted(f"{m}.{k}" for m, attrs in attributes.items() for k, v in attrs.items()
                     if attributes_after.get(m, {}).get(k, v) != v)
    print(json.dumps({
        "package": fairseq_outlayers.__file__,
        "excepthook": sys.excepthook is hooks[0] and sys.excepthook is sys.__excepthook__,
        "displayhook": sys.displayhook is hooks[1],
        "functions": [a is b for a, b in zip(functions, (fairseq.utils.post_process_prediction,
                                                          fairseq.utils.load_align_dict, fairseq.utils.replace_unk))],
        "rebound": rebound, "state_changed": sorted(k for k in before if before[k] != after[k]),
        "safe_globals_added": sorted(set(map(repr, torch.serialization.get_safe_globals())) - safe),
        "registered": "outlayers_transformer" in fairseq.models.MODEL_REGISTRY}))
""")


def test_import_registers_and_changes_nothing_else():
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONWARNINGS": "ignore",
                               "OUTLAYERS_USER_DIR": os.path.join(REPO, "fairseq_outlayers")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["package"].startswith(REPO)
    assert got["excepthook"] and got["displayhook"]
    assert got["functions"] == [True, True, True]  # post_process_prediction, load_align_dict, replace_unk
    # torch's set of allow-listed globals is the one module attribute that may change: the checkpoint allow-list
    # fairseq's import_models rebinds fairseq.models.<file>_parser (a parser for its docs) when a file of the user
    # directory's models/ is named like a registered model (transformer.py, lstm.py): fairseq's doing, not ours
    rebound = [r for r in got["rebound"] if r not in ("fairseq.models.lstm_parser", "fairseq.models.transformer_parser")]
    assert rebound in ([], ["torch._weights_only_unpickler._marked_safe_globals_set"]), got["rebound"]
    assert got["state_changed"] == []
    from fairseq_outlayers.core.checkpoint_safety import ALLOWED_GLOBALS

    assert "<class 'argparse.Namespace'>" in got["safe_globals_added"]
    assert got["safe_globals_added"] == sorted(set(map(repr, ALLOWED_GLOBALS)))
    assert got["registered"]


def test_the_package_alone_loads_only_the_standard_library_and_registers_nothing():
    """``import fairseq_outlayers`` (a text tool, the version) loads no torch and no fairseq; the models register
    when ``fairseq_outlayers.models`` is imported, which ``--user-dir`` does."""
    probe = ("import sys, fairseq_outlayers\n"
             "print(sorted(m for m in ('torch', 'fairseq', 'numpy') if m in sys.modules), fairseq_outlayers.__version__)")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[0] == "[]"
