"""One GPU per run of the package's runners (``ledger run``, ``cli.compare`` / ``make demo``, ``scripts/vmf_sweep.py``).

fairseq-train trains data-parallel over every GPU it can see (its ``--distributed-world-size`` defaults to the
device count), which multiplies the batch by the number of GPUs: a row run that way is not the row its records
(or the documented quick tables) were made with. The runners therefore give each run, and the fairseq-generate of
its tests, one GPU through ``CUDA_VISIBLE_DEVICES``: with ``--jobs N`` the N run slots take the visible GPUs in
turn (N > GPUs puts several small runs on one GPU, which share it well); a runner without ``--jobs`` uses the first
visible GPU. Without CUDA nothing is set. A ledger step row's in-process step (``ledger/steps.py``, the bias fit)
runs in the ledger's own process, on its run's GPU (``torch_device``). Data-parallel training is fairseq-train's
own, run by hand.
"""
import os
import queue
from typing import Dict, List, Optional


def visible_gpus(environ=None) -> List[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` names them (indices, or UUIDs / MIG names when
    it lists those); [] without CUDA or when it is set empty."""
    environ = os.environ if environ is None else environ
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip() and d.strip() != "-1"]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    except Exception:  # noqa: BLE001  (a broken CUDA setup trains on the CPU, as fairseq would)
        return []


def slots(jobs: int, gpus: List[str]) -> Optional["queue.Queue"]:
    """A queue of ``jobs`` run slots, each one GPU name, the GPUs taken in turn; None without GPUs."""
    if not gpus:
        return None
    q = queue.Queue()
    for i in range(jobs):
        q.put(gpus[i % len(gpus)])
    return q


def slot_env(gpu: Optional[str]) -> Dict[str, str]:
    """The environment a run in slot ``gpu`` gets: ``CUDA_VISIBLE_DEVICES`` set to it, or nothing without GPUs."""
    return {"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else {}


def torch_device(env: Dict[str, str], environ=None) -> str:
    """The torch device, in this process, of the GPU a run's ``env`` gives its subprocesses (``cuda:I``, I its
    place among this process's visible GPUs); ``cuda`` / ``cpu`` as ``bias_fit.default_device`` without one."""
    gpu = env.get("CUDA_VISIBLE_DEVICES")
    found = visible_gpus(environ)
    if gpu is not None and gpu in found:
        return f"cuda:{found.index(gpu)}"
    return "cuda" if found else "cpu"
