"""Tiny end-to-end runs through fairseq's real command-line tools, shared by every test module.

``make_corpus`` writes a small synthetic parallel corpus (a deterministic word-by-word translation with
reordering, so a model can learn something in a few updates), ``preprocess`` binarises it with
``fairseq-preprocess``, ``train`` runs ``fairseq-train --user-dir ...`` for a few updates and ``generate`` runs
``fairseq-generate`` and parses its hypotheses. Every call runs the real program, called in the test process as
fairseq's own tests call it (``run``). A user mistake ends fairseq's
own CLIs with a traceback whose last line is the message, and the package's ``outlayers-train`` /
``outlayers-generate`` with that one line: tests of error messages run the latter (``cli=...``).

Both run on the CPU (``--cpu``) unless a device is asked for: ``device="cuda"`` per call, or for every call the
environment variable ``OUTLAYERS_TEST_DEVICE=cuda`` (which ``pytest --device cuda`` sets, see conftest.py).
"""
import os
import pathlib
import re
import subprocess
import sys
from typing import Dict, List, Optional

import in_process
from fairseq_outlayers import USER_DIR  # noqa: F401  (the tests' --user-dir)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
DEVICE_ENV = "OUTLAYERS_TEST_DEVICE"
#: why a test of the pairing's built-in fast_align skips (``pytest.importorskip("systran_align", reason=...)``)
NO_ALIGNER = ("systran-align (the pairing's built-in fast_align) is not installed; it has no build for Python 3.12 "
              "or later")


def device_args(device: Optional[str] = None) -> List[str]:
    """``["--cpu"]`` for the CPU, nothing for CUDA (fairseq then uses the GPU); ``device`` defaults to
    ``$OUTLAYERS_TEST_DEVICE`` or ``cpu``."""
    device = device or os.environ.get(DEVICE_ENV) or "cpu"
    if device not in ("cpu", "cuda"):
        raise ValueError(f"test device must be cpu or cuda, not {device!r}")
    return ["--cpu"] if device == "cpu" else []


def tool(name: str) -> str:
    """Path of a console script installed next to the running Python (the project's venv)."""
    path = os.path.join(BIN, name)
    return path if os.path.exists(path) else name


def run(cmd: List[str], cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None, check: bool = True,
        timeout: int = 600, input: Optional[str] = None) -> subprocess.CompletedProcess:
    """``cmd`` run as ``subprocess.run(..., capture_output=True, text=True)`` would run it. A console script of
    fairseq or this package, ``python -m`` one of their modules or ``python SCRIPT.py`` is called in the test
    process (``in_process.py``, which says when not); anything else (a shell script, ``python -c``) is a new
    process. ``OUTLAYERS_TEST_SUBPROCESS=1`` makes every command a new process."""
    full_env = dict(os.environ)
    full_env.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)  # the plugin must load checkpoints without it
    full_env.update({"PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    full_env.update(env or {})
    function = in_process.program(cmd, BIN, full_env, cwd)
    if function is not None:
        # a command that must succeed and raises: the exception itself reaches pytest (and ``--pdb``)
        proc = in_process.call(function, cmd, cwd=cwd, env=full_env, timeout=timeout, input=input, reraise=check)
    else:
        proc = subprocess.run(cmd, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout,
                              input=input)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"command failed ({proc.returncode}): {' '.join(cmd)}\n--- stdout ---\n{proc.stdout[-4000:]}"
            f"\n--- stderr ---\n{proc.stderr[-4000:]}"
        )
    return proc


def process_env(env: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment of a command the tests start as a process of its own (``subprocess.Popen``)."""
    full = dict(os.environ)
    full.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)  # the plugin must load checkpoints without it
    full.update({"PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    full.update(env or {})
    return full


def pairing_file(raw_dir: str, bin_dir: str, path: str, src: str = "de", tgt: str = "en") -> str:
    """The shared-private pairing file of a corpus, as the models' tests need one. With systran-align, the
    built-in fast_align; without it (Python 3.12 or later), a diagonal Pharaoh alignment (source word i with target
    word i) read with ``--aligner pharaoh``: a pairing for the model's mechanics, not a good one."""
    from fairseq_outlayers.tools.pairing.__main__ import main

    args = ["--src-text", os.path.join(raw_dir, f"train.{src}"), "--tgt-text", os.path.join(raw_dir, f"train.{tgt}"),
            "--src-dict", os.path.join(bin_dir, f"dict.{src}.txt"),
            "--tgt-dict", os.path.join(bin_dir, f"dict.{tgt}.txt"), "-o", path]
    try:
        import systran_align  # noqa: F401
    except ImportError:
        align = path + ".diagonal.align"
        with open(args[1], encoding="utf-8") as fs, open(args[3], encoding="utf-8") as ft, \
                open(align, "w", encoding="utf-8") as out:
            for a, b in zip(fs, ft):
                n = min(len(a.split()), len(b.split()))
                out.write(" ".join(f"{i}-{i}" for i in range(n)) + "\n")
        args += ["--aligner", "pharaoh", "--alignment", align]
    if main(args) != 0:
        raise AssertionError(f"the pairing tool failed on {raw_dir}")
    return path


def make_corpus(raw_dir: str, n_train: int = 240, n_valid: int = 24, n_test: int = 24, vocab: int = 40,
                seed: int = 0, src: str = "de", tgt: str = "en", shared_words: int = 4) -> str:
    """train/valid/test.{src,tgt} from the package's synthetic generator (target = reversed translation)."""
    from fairseq_outlayers.tools.synthetic import write_corpus

    return write_corpus(raw_dir, (("train", n_train), ("valid", n_valid), ("test", n_test)), src, tgt,
                        vocab=vocab, shared_words=shared_words, seed=seed)


def tokenised_corpus(root, target_bpe: bool):
    """(raw folder, tok folder as a Path, its Preparation): a synthetic corpus under ROOT/raw, tokenised and lowercased into
    ROOT/tok the way scripts/prepare-multi30k.sh does (``target_bpe``: whether the preparation's target side takes
    BPE, which the caller adds)."""
    from fairseq_outlayers.tools.rawtext import Preparation

    raw = make_corpus(os.path.join(str(root), "raw"))
    prep = Preparation("de", "en", lowercase=True, bpe_codes=None, target_bpe=target_bpe)
    tok = pathlib.Path(root) / "tok"
    tok.mkdir()
    for split in ("train", "valid", "test"):
        for lang in ("de", "en"):
            with open(os.path.join(raw, f"{split}.{lang}"), encoding="utf-8") as f:
                lines = f.read().splitlines()
            (tok / f"{split}.{lang}").write_text("".join(x + "\n" for x in prep.tokenise(lines, lang)),
                                                 encoding="utf-8")
    return raw, tok, prep


def preprocess(raw_dir: str, bin_dir: str, src: str = "de", tgt: str = "en", joined: bool = False,
               extra: Optional[List[str]] = None) -> str:
    cmd = [tool("fairseq-preprocess"), "--source-lang", src, "--target-lang", tgt,
           "--trainpref", os.path.join(raw_dir, "train"), "--validpref", os.path.join(raw_dir, "valid"),
           "--testpref", os.path.join(raw_dir, "test"), "--destdir", bin_dir, "--workers", "1"]
    if joined:
        cmd.append("--joined-dictionary")
    run(cmd + list(extra or []))
    return bin_dir


TINY_TRANSFORMER = ["--arch", "outlayers_transformer", "--encoder-layers", "1", "--decoder-layers", "1",
                    "--encoder-embed-dim", "32", "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
                    "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2",
                    "--decoder-attention-heads", "2", "--dropout", "0.0"]
TINY_LSTM = ["--arch", "outlayers_lstm", "--encoder-embed-dim", "32", "--encoder-hidden-size", "16",
             "--decoder-embed-dim", "32", "--decoder-hidden-size", "32", "--decoder-out-embed-dim", "32",
             "--dropout", "0.0"]


def train_args(bin_dir: str, save_dir: str, arch_args: Optional[List[str]] = None,
               extra: Optional[List[str]] = None, max_update: int = 4, user_dir: Optional[str] = USER_DIR,
               device: Optional[str] = None) -> List[str]:
    args = [bin_dir] + (["--user-dir", user_dir] if user_dir else []) + list(arch_args or TINY_TRANSFORMER) + [
        "--optimizer", "adam", "--lr", "0.003", "--max-tokens", "600", "--max-update", str(max_update),
        "--save-dir", save_dir, "--seed", "1"] + device_args(device) + ["--no-progress-bar", "--log-interval", "1",
        "--log-format", "simple", "--num-workers", "0", "--no-epoch-checkpoints",
        # no background batch prefetching: with --max-update ending training mid-epoch, fairseq's prefetch thread
        # (data/iterators.py BufferedIterator, a daemon thread) may still be collating batches when the interpreter
        # exits, and a daemon thread stopped inside torch code aborts the process ("terminate called without an
        # active exception", exit -6) after a complete, saved run: seen twice in one loaded CI run (2026-11-26),
        # not reproduced in 120 tries; the batches and their order are the same either way
        "--data-buffer-size", "0",
    ]
    return args + list(extra or [])


def train(bin_dir: str, save_dir: str, arch_args=None, extra=None, max_update: int = 4, device=None,
          cli: str = "fairseq-train", **kw):
    """``cli="outlayers-train"`` for the package's entry point, which prints a user mistake as one line."""
    return run([tool(cli)] + train_args(bin_dir, save_dir, arch_args, extra, max_update, device=device), **kw)


def generate(bin_dir: str, checkpoint: str, extra: Optional[List[str]] = None, device=None,
             cli: str = "fairseq-generate", **kw):
    """Run fairseq-generate (or ``cli``) on the test split; returns (process, {sentence id: hypothesis tokens})."""
    cmd = [tool(cli), bin_dir, "--user-dir", USER_DIR, "--path", checkpoint, "--beam", "2",
           "--max-tokens", "2000"] + device_args(device) + ["--num-workers", "0"] + list(extra or [])
    proc = run(cmd, **kw)
    return proc, parse_hypotheses(proc.stdout)


def parse_hypotheses(stdout: str) -> Dict[int, str]:
    hyps = {}
    for line in stdout.splitlines():
        m = re.match(r"^H-(\d+)\t[-\d.einf]+\t(.*)$", line)
        if m:
            hyps[int(m.group(1))] = m.group(2)
    return hyps


def logged_losses(stdout_and_err: str, key: str = "loss") -> List[float]:
    """The per-update training values of ``key`` from fairseq's simple-format train_inner log lines."""
    return [float(m.group(1)) for m in re.finditer(rf"train_inner \| .*?\b{key}=(-?[\d.]+)", stdout_and_err)]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_distributed(bin_dir: str, save_dir: str, arch_args=None, extra=None, max_update: int = 4,
                      world_size: int = 2, timeout: int = 600):
    """Data-parallel fairseq-train on the CPU: one process per rank started by hand (gloo backend), as
    fairseq's launcher assumes CUDA. Returns the list of finished processes (rank 0 first)."""
    port = free_port()
    base = [tool("fairseq-train")] + train_args(bin_dir, save_dir, arch_args, extra, max_update) + [
        "--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp",
        "--distributed-init-method", f"tcp://127.0.0.1:{port}", "--distributed-world-size", str(world_size),
        "--distributed-no-spawn"]
    env = process_env()
    procs = [subprocess.Popen(base + ["--distributed-rank", str(r)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(world_size)]
    outs = []
    for r, p in enumerate(procs):
        out, _ = p.communicate(timeout=timeout)
        outs.append(out)
        if p.returncode != 0:
            for q in procs:
                q.kill()
            raise AssertionError(f"rank {r} failed ({p.returncode}):\n{out[-4000:]}")
    return outs


def softmax_layers() -> List[str]:
    """The package's softmax-type output layers, read from the registry: a new one is tested with the others."""
    import fairseq_outlayers.models  # noqa: F401  (registers the layers)
    from fairseq_outlayers.core.registry import OUTPUT_LAYER_REGISTRY

    return sorted(name for name, spec in OUTPUT_LAYER_REGISTRY.items()
                  if spec.softmax_type and spec.build.__module__.startswith("fairseq_outlayers."))


def layer_data(layer: str, bin_dir: str, joined_bin_dir: str) -> str:
    """The tiny corpus a layer trains on: the joined-dictionary one when the layer needs it."""
    from fairseq_outlayers.core.registry import OUTPUT_LAYER_REGISTRY

    return joined_bin_dir if OUTPUT_LAYER_REGISTRY[layer].requires_joined_dictionary else bin_dir


def build_model(bin_dir: str, arch_args=None, extra=None):
    """Build (task, model) in this process exactly as fairseq-train would, from command-line options."""
    from fairseq import options, tasks

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [bin_dir, "--user-dir", USER_DIR] + list(arch_args or TINY_TRANSFORMER)
                                       + list(extra or []))
    task = tasks.setup_task(args)
    return task, task.build_model(args)


def load_script(name: str):
    """``scripts/NAME`` imported as a module (scripts are not a package), for tests that call its functions."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name[:-3] if name.endswith(".py") else name,
                                                  os.path.join(REPO, "scripts", name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def partial_ledger_run(tmp_path, digest: Optional[str] = None, patience: Optional[int] = None):
    """A ledger row ``tied`` (with ``# patience: PATIENCE`` when given) on a one-file data directory, and its work
    directory ``work/tied.seed1`` holding the row's options and ``digest`` (default: the data's own), as a run cut
    off after it started leaves them."""
    import json

    from fairseq_outlayers.lab.ledger import records
    from fairseq_outlayers.lab.ledger.rows import LedgerRow, row_options

    data = tmp_path / "data"
    data.mkdir()
    (data / "dict.en.txt").write_text("a 1\n")
    row = LedgerRow("tied", "rows/20-tied.args", str(data), ["--output-layer", "tied"], patience=patience)
    work = tmp_path / "work" / "tied.seed1"
    work.mkdir(parents=True)
    (work / "options.json").write_text(json.dumps(row_options(row, 1, 5, 50, 5)))
    (work / "data_digest").write_text((digest or records.data_digest(str(data))) + "\n")
    return row, work


def once_per_session(tmp_path_factory, name: str, make):
    """``make(folder)``'s JSON-able result, made once for the whole test session: under pytest-xdist every worker
    is a process of its own, and a module- or session-scoped fixture runs again in each worker that needs it. The
    first worker makes it in a folder of the session's shared temporary root, under a file lock; the others wait
    for it and read the result. Without xdist, the session's own temporary root."""
    import json

    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    done = root / f"{name}.json"
    with FileLock(str(root / f"{name}.lock")):
        if done.is_file():
            return json.loads(done.read_text())
        folder = root / name
        if folder.exists():  # a worker that failed while making it: start again
            import shutil

            shutil.rmtree(folder)
        folder.mkdir()
        result = make(folder)
        done.write_text(json.dumps(result))
        return result
