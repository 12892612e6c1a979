"""Shared by the benchmark scripts: timing and memory helpers (device sync, gradients cleared, peak memory of a
step), the device's measured matmul FLOP/s, the FLOP count of one training step of each output layer, and the
report (the machine and commit, the command line, ratios, the results file: checked before the run, written
atomically, never clobbered without ``--force``).

FLOP counts (one multiply-add = 2 FLOP; backward = 2x forward for a matmul whose inputs both need gradients;
element-wise work, the loss and the optimizer are left out). N target tokens, H = decoder output size, V the
vocabulary (or the sampled |V'|), m the continuous output size, d_j the joint size, d the embedding size:

* learned / tied / fixed softmax, fwd+bwd:      6 N H V     (fixed: the frozen V x H table needs no weight
  gradient, so 4 N H V; the fixed benchmark reports both layers with their own count)
* joint, full structure (eq. 15), fwd+bwd:      6 (N d_j V + V d d_j + N H d_j)
                                                 (logits, g_out(E) = sigma(E U), g_inp(h) = sigma(V h))
* continuous (H -> m, frozen V x m table):      6 N H m  for the projection; the loss is O(N m), decoding
                                                 adds 2 N m V per step for the nearest-neighbour scores
* whole model: 6 x tokens x matmul parameters   (Kaplan et al. 2020; attention scores left out)
"""
import contextlib
import os
import platform
import shlex
import subprocess
import sys
import time
from typing import Optional

_MATMUL_CACHE = {}


# ------------------------------------------------------------------------------------------------------------
# timing and memory
# ------------------------------------------------------------------------------------------------------------

def sync(device):
    """Wait for the device's queued work (CUDA), so that a wall-clock interval covers it."""
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def clear_grads(module, features=None):
    """Drop the gradients of ``module``'s parameters (and of the ``features`` leaf) before the next timed step."""
    if features is not None:
        features.grad = None
    for p in module.parameters():
        p.grad = None


def proc_status(key: str) -> int:
    """A byte count of this process from /proc/self/status (``VmRSS``, ``VmHWM``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{key} not in /proc/self/status")


@contextlib.contextmanager
def peak_memory(device):
    """Peak bytes above the level at entry while the block runs, in ``result["bytes"]`` after it: CUDA, the
    allocator's peak; CPU, the resident-set high-water mark (reset at entry through /proc/self/clear_refs)."""
    import torch

    result = {}
    cuda = str(device).startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = proc_status("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the resident-set high-water mark to the current size
    yield result
    if cuda:
        torch.cuda.synchronize()
        result["bytes"] = torch.cuda.max_memory_allocated() - base
    else:
        result["bytes"] = proc_status("VmHWM") - base


def check_device(parser, device: str):
    """A --device cuda that torch cannot see is a usage error."""
    import torch

    if str(device).startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda asked for, but torch sees no CUDA device")


def matmul_flops(device: str = "cpu", n: Optional[int] = None, repeats: int = 5) -> float:
    """Best measured float32 FLOP/s of an n x n @ n x n matmul on ``device`` (once per process and device)."""
    import torch

    dev = torch.device(device)
    n = n or (8192 if dev.type == "cuda" else 2048)
    key = (str(dev), n)
    if key not in _MATMUL_CACHE:
        a = torch.randn(n, n, device=dev)
        b = torch.randn(n, n, device=dev)
        best = float("inf")
        for i in range(repeats + 1):
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            a @ b
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            if i:  # the first is a warm-up
                best = min(best, time.perf_counter() - t0)
        _MATMUL_CACHE[key] = 2.0 * n ** 3 / best
    return _MATMUL_CACHE[key]


def softmax_step_flops(tokens: int, hidden: int, vocab: int, weight_grad: bool = True) -> float:
    """6 N H V (forward 2 N H V, backward 4 N H V; 4 N H V when the V x H matrix is frozen)."""
    return (6.0 if weight_grad else 4.0) * tokens * hidden * vocab


def joint_step_flops(tokens: int, hidden: int, emb_dim: int, joint_dim: int, vocab: int) -> float:
    """6 (N d_j V + V d d_j + N H d_j): joint logits, g_out over the V rows, g_inp over the N states."""
    return 6.0 * (tokens * joint_dim * vocab + vocab * emb_dim * joint_dim + tokens * hidden * joint_dim)


def continuous_step_flops(tokens: int, hidden: int, m: int) -> float:
    """6 N H m: the H -> m projection; the vMF / cosine loss is O(N m)."""
    return 6.0 * tokens * hidden * m


def model_step_flops(tokens: int, matmul_params: int) -> float:
    """6 x tokens x parameters that take part in a matmul (embedding lookups excluded)."""
    return 6.0 * tokens * matmul_params


# ------------------------------------------------------------------------------------------------------------
# the report
# ------------------------------------------------------------------------------------------------------------

def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo, else what ``platform`` knows of it."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def git_commit(repo: str, *watched: str) -> str:
    """The checkout's short commit, "+ (NAME modified)" when a ``watched`` path differs from it, or "unknown"."""
    try:
        commit = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        dirty = watched and subprocess.run(["git", "-C", repo, "status", "--porcelain", "--", *watched],
                                           capture_output=True, text=True).stdout.strip()
    except OSError:
        return "unknown"
    if dirty:
        commit += f" ({os.path.basename(watched[0])} modified)"
    return commit or "unknown"


def device_name(device) -> str:
    """The GPU's name, or the CPU's model name and core count."""
    import torch

    if str(device).startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"{cpu_name()}, {os.cpu_count()} cores"


def stamp(device, started: Optional[float] = None) -> str:
    """``Date: ...; commit ...; device ...`` of a page, the line after its command (``python -m
    fairseq_outlayers.lab.docs`` reads the four facts); ``started``: the run's start (time.time())."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started))
    return f"Date: {when}; commit {git_commit(repo, 'fairseq_outlayers')}; device {device_name(device)}."


def ratio(a, b):
    return a / b if b else float("nan")


def command_line(script: str, argv=None) -> str:
    """``python scripts/SCRIPT args...`` as the run was started (``argv`` as given to main, else sys.argv), each
    argument quoted for the shell where it needs it (spaces, quotes), so that the line can be pasted."""
    args = sys.argv[1:] if argv is None else argv
    return f"python scripts/{script}" + "".join(" " + shlex.quote(a) for a in args)


def gflops(flops_per_s: float) -> str:
    return f"{flops_per_s / 1e9:,.1f}"


def flops_note(device: str, peak: float) -> str:
    return (f"Achieved GFLOP/s = the step's FLOP count (formulas in fairseq_outlayers/lab/bench/benchlib.py and the "
            f"method's doc) / its time; the device's measured float32 matmul: {gflops(peak)} GFLOP/s on `{device}` "
            "(best of 5 square matmuls, this run, same threads).")


def check_output(path: str, force: bool, option: str = "--output"):
    """Before the run: refuse an output that exists (without --force) or cannot be written (one line, exit 2)."""
    from fairseq_outlayers.errors import OutlayersConfigError
    from fairseq_outlayers.outfiles import check_output_path

    try:
        check_output_path(path, force=force, option=option)
    except OutlayersConfigError as e:
        raise SystemExit(f"error: {e}")


def write_output(path: str, text: str):
    """The results file, complete or not at all."""
    from fairseq_outlayers.outfiles import write_text

    write_text(path, text)


def finish(path: str, text: str):
    """Print the report and write it to the results file."""
    print()
    print(text)
    write_output(path, text)
    print(f"written to {path}")


def add_output_args(parser, default: str):
    parser.add_argument("--output", default=default, help=f"markdown results file (default: {os.path.relpath(default)})"
                        " ; refused if it exists, unless --force")
    parser.add_argument("--force", action="store_true", help="overwrite an existing --output file")
