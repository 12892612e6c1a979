"""N runs at once for the package's runners (``ledger run --jobs N``, ``lab.compare --jobs N`` / ``make demo``).

``run_in_slots(tasks, work, jobs)`` calls ``work(task, env)`` for every task, at most ``jobs`` at a time, started in
the order given, and yields ``(index, result, error)`` as each one finishes: the caller gathers the results by index,
so nothing it writes depends on which run ends first. A failed task (any exception, or ``SystemExit``) is yielded
with its error and the others go on; an error of a ``stop`` type is raised instead, once the runs already started
have ended, and no further task starts.

Each slot has its own ``env`` for the run's processes: on CUDA one GPU (``gpus.py``: the slots take the visible
GPUs in turn); on a CPU with ``jobs`` > 1, ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` set to the cores / ``jobs``
(at least 1), since N runs of torch's default thread count would fight over the same cores. An
``OMP_NUM_THREADS`` already set in the environment is the user's choice and is kept.
"""
import concurrent.futures
import os
import queue
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from fairseq_outlayers.lab import gpus

#: the variables that set a CPU run's threads (torch's intra-op pool reads the first, MKL the second)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def cpu_cores() -> int:
    """The CPU cores this process may run on (its affinity where the platform tells it, else the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover  (macOS, Windows)
        return os.cpu_count() or 1


def default_jobs(runs: int, environ=None, cores: Optional[int] = None) -> int:
    """How many runs at once when ``--jobs`` is not given: one per visible GPU on CUDA, else one per CPU core;
    never more than ``runs``, at least 1."""
    found = gpus.visible_gpus(environ)
    n = len(found) if found else (cores or cpu_cores())
    return max(1, min(n, runs))


def slot_envs(jobs: int, gpu_names: List[str], environ=None, cores: Optional[int] = None) -> List[Dict[str, str]]:
    """The environment of each of ``jobs`` slots: its GPU (the GPUs taken in turn); without GPUs and with more than
    one slot, the threads of each (``cores`` / ``jobs``, at least 1) unless ``OMP_NUM_THREADS`` is set already;
    else nothing."""
    environ = os.environ if environ is None else environ
    if gpu_names:
        return [gpus.slot_env(gpu_names[i % len(gpu_names)]) for i in range(jobs)]
    if jobs == 1 or environ.get("OMP_NUM_THREADS"):
        return [{} for _ in range(jobs)]
    threads = str(max(1, (cores or cpu_cores()) // jobs))
    return [{name: threads for name in THREAD_VARIABLES} for _ in range(jobs)]


def describe(jobs: int, environ=None, cores: Optional[int] = None) -> str:
    """"2 runs at once, OMP_NUM_THREADS=1 each", "1 run at a time" (and the GPUs they take, on CUDA)."""
    environ = os.environ if environ is None else environ
    found = gpus.visible_gpus(environ)
    envs = slot_envs(jobs, found, environ, cores)
    head = "1 run at a time" if jobs == 1 else f"{jobs} runs at once"
    if found:
        return f"{head}, on GPU {', '.join(sorted(set(e['CUDA_VISIBLE_DEVICES'] for e in envs)))}"
    threads = envs[0].get("OMP_NUM_THREADS") or environ.get("OMP_NUM_THREADS")
    return f"{head}, OMP_NUM_THREADS={threads or 'unset'}{' each' if jobs > 1 else ''}"


def run_in_slots(tasks: Sequence, work: Callable[[Any, Dict[str, str]], Any], jobs: int,
                 stop: Tuple[type, ...] = (), environ=None,
                 cores: Optional[int] = None) -> Iterator[Tuple[int, Any, Optional[BaseException]]]:
    """``(index, result, None)`` or ``(index, None, error)`` for each task, as it finishes (with ``jobs`` = 1: one
    after another, in order, in this thread). An error of a ``stop`` type is raised: no further task starts, and
    those running are waited for."""
    tasks = list(tasks)
    envs = slot_envs(jobs, gpus.visible_gpus(environ), environ, cores)
    if jobs == 1:
        for i, task in enumerate(tasks):
            try:
                outcome = (i, work(task, envs[0]), None)
            except stop:
                raise
            except (SystemExit, Exception) as exc:  # one failed run must not stop the others
                outcome = (i, None, exc)
            yield outcome
        return
    free = queue.Queue()
    for env in envs:
        free.put(env)
    stopped = threading.Event()  # set by the run that raised a stop error, before its slot can take another task

    def one(task):
        if stopped.is_set():
            raise _NotStarted()
        env = free.get()
        try:
            return work(task, env)
        except stop:
            stopped.set()
            raise
        finally:
            free.put(env)

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs)
    try:
        futures = {pool.submit(one, task): i for i, task in enumerate(tasks)}
        for future in concurrent.futures.as_completed(futures):
            error = future.exception()  # SystemExit too: the pool's workers catch BaseException
            if isinstance(error, _NotStarted):
                continue
            if error is not None and (isinstance(error, stop) or not isinstance(error, (SystemExit, Exception))):
                raise error  # a stop error; KeyboardInterrupt and the like
            yield futures[future], None if error is not None else future.result(), error
    finally:  # also when the caller stops reading: nothing new starts, the running runs end
        stopped.set()
        pool.shutdown(wait=True, cancel_futures=True)


class _NotStarted(Exception):
    """A task not started because an earlier one raised a stop error."""
