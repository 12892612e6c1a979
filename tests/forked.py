"""A command of the tests run in a fork of the test process, instead of a new Python.

Every ``fairseq-train`` or ``outlayers-generate`` the tests start would first import torch and fairseq again:
about three CPU-seconds a command before any work, most of the suite's time. A fork already has them. The child
gets the command's argv, environment, working directory and standard input; its standard output and error go to
files the parent reads back; its exit status is the command's (``SystemExit`` as a console script gives it, 1
and a traceback on stderr for an uncaught exception). The parent waits, with the command's timeout.

What a fork cannot give is a fresh import. So a command runs in a real subprocess when its environment changes
what Python imports (``PYTHONHOME``, a ``PYTHONPATH`` entry other than the folder holding the package ...), for
``fairseq-hydra-train`` and ``python -m pytest`` (they keep global state), for anything but a console script of
this venv or ``python -m MODULE``, ``python SCRIPT.py`` or ``python -c CODE``, and for every command when
``OUTLAYERS_TEST_SUBPROCESS=1`` (the coverage run of ``docs/development.md`` uses it). The commands a shell script
starts are served the same way by ``forkserver.py``.

Nothing forks a process that has initialised CUDA: torch refuses CUDA in such a fork. Once the test process has
(``cuda_initialised``), or when the tests run on CUDA (``OUTLAYERS_TEST_DEVICE=cuda``, as ``scripts/gpu_run.sh``
sets it), every command is a new process, and ``run`` refuses to fork.
"""
import importlib
import io
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from importlib import metadata
from typing import Callable, Dict, List, Optional

SUBPROCESS_ENV = "OUTLAYERS_TEST_SUBPROCESS"
#: console scripts (and ``python -m`` modules) that keep global state a fork would share with the test process
NOT_FORKED = {"fairseq-hydra-train", "pytest", "py.test"}
#: environment variables that change what a new Python imports: a fork could not honour them
IMPORT_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH", "PYTHONNOUSERSITE",
              "PYTHONUSERBASE", "PYTHONEXECUTABLE")
#: modules a child imports afresh: the programs (what they do on import happens again), not the plugin
FRESH_MODULES = ("fairseq_cli.", "fairseq_outlayers.tools", "fairseq_outlayers.lab", "fairseq_outlayers.__main__")
#: the packages whose console scripts a fork runs
FORKABLE = ("fairseq_cli.", "fairseq_outlayers.")
#: the environment variables that put the tests' commands on a device: on CUDA, every command is a new process
DEVICE_ENV = ("OUTLAYERS_TEST_DEVICE", "OUTLAYERS_CUDA_TEST_DEVICE")
#: where Linux lists the libraries a process has loaded: ``torch.cuda.is_available()`` loads the CUDA driver
MAPS = "/proc/self/maps"
#: the folder holding the package: on ``PYTHONPATH`` it changes no import of the package (scripts put it there)
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(
    importlib.import_module("fairseq_outlayers").__file__)))

_scripts: Optional[Dict[str, str]] = None
#: the loggers' levels once the test process has imported torch, fairseq and the plugin (conftest imports this
#: module after them): what the modules set on import, as a new process would have them
_IMPORT_LEVELS = {name: logger.level for name, logger in logging.root.manager.loggerDict.items()
                  if isinstance(logger, logging.Logger)}


def _console_scripts() -> Dict[str, str]:
    global _scripts
    if _scripts is None:
        _scripts = {ep.name: ep.value for ep in metadata.entry_points(group="console_scripts")}
    return _scripts


def cuda_initialised() -> bool:
    """Whether this process has initialised CUDA, so that a fork of it cannot use CUDA: torch's lazy
    initialisation (``torch.cuda.is_initialized()``), or the CUDA driver loaded by ``torch.cuda.is_available()``."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return True
    try:
        with open(MAPS, encoding="utf-8", errors="replace") as f:
            return any("libcuda.so" in line for line in f)
    except OSError:
        return False


def fork_allowed(env: Dict[str, str]) -> bool:
    """Whether a command with environment ``env`` may run in a fork of this process: not on CUDA, not after CUDA
    was initialised here, not with ``OUTLAYERS_TEST_SUBPROCESS=1``."""
    return (env.get(SUBPROCESS_ENV) != "1" and hasattr(os, "fork") and "cuda" not in {env.get(k) for k in DEVICE_ENV}
            and not cuda_initialised())


def target(cmd: List[str], bin_dir: str, env: Dict[str, str]) -> Optional[Callable[[], object]]:
    """The function that runs ``cmd`` in this process, or None when ``cmd`` needs a new Python."""
    if not cmd or not fork_allowed(env):
        return None
    if any(env.get(k) != os.environ.get(k) for k in IMPORT_ENV if k != "PYTHONPATH"):
        return None
    if _new_paths(env) is None:
        return None
    program = cmd[0]
    if os.path.abspath(program) in (os.path.abspath(sys.executable), os.path.join(bin_dir, "python")):
        if len(cmd) >= 3 and cmd[1] == "-m" and not cmd[2].startswith("-") and cmd[2] not in NOT_FORKED:
            module = cmd[2]
            return lambda: _run_module(module)
        if len(cmd) >= 3 and cmd[1] == "-c":
            code = cmd[2]
            return lambda: _run_code(code)
        if len(cmd) >= 2 and cmd[1].endswith(".py") and os.path.isfile(cmd[1]):
            path = cmd[1]
            return lambda: _run_path(path)
        return None
    name = os.path.basename(program)
    if os.path.dirname(program) not in ("", bin_dir) or name in NOT_FORKED:
        return None
    value = _console_scripts().get(name)
    if value is None or ":" not in value:
        return None
    module, _, attr = value.partition(":")
    if not module.startswith(FORKABLE):
        return None

    def call():
        function = importlib.import_module(module)
        for part in attr.split("."):
            function = getattr(function, part)
        return function()
    return call


def _new_paths(env: Dict[str, str]) -> Optional[List[str]]:
    """The entries ``env``'s ``PYTHONPATH`` adds to this process's: [] when it is the same, None when a fork
    would import otherwise. An entry already on ``sys.path``, or the folder holding the package, changes nothing
    this process has imported."""
    if env.get("PYTHONPATH") == os.environ.get("PYTHONPATH"):
        return []
    known = {os.path.realpath(p) for p in sys.path if p} | {os.path.realpath(PACKAGE_ROOT)}
    entries = [p for p in (env.get("PYTHONPATH") or "").split(os.pathsep) if p]
    if not all(os.path.realpath(p) in known for p in entries):
        return None
    return entries


def _run_module(module: str):
    import runpy

    sys.path.insert(0, os.getcwd())  # as ``python -m`` puts it first
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def _run_code(code: str):
    import builtins

    sys.path.insert(0, "")  # as ``python -c`` puts it first
    exec(compile(code, "<string>", "exec"), {"__name__": "__main__", "__builtins__": builtins})


def _run_path(path: str):
    import runpy

    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))  # as ``python SCRIPT`` puts it first
    runpy.run_path(path, run_name="__main__")


def _alias_user_dir(argv: List[str]) -> None:
    """A ``--user-dir`` that is the imported package by another path (a symbolic link): a new Python would import
    the package from there, and fairseq refuses a second path for a module it has. The path joins the package's
    ``__path__``, which finds the same files."""
    package = sys.modules.get("fairseq_outlayers")
    if package is None:
        return
    for i, arg in enumerate(argv):
        path = argv[i + 1] if arg == "--user-dir" and i + 1 < len(argv) else (
            arg.partition("=")[2] if arg.startswith("--user-dir=") else None)
        if not path:
            continue
        path = os.path.abspath(path)
        if path not in package.__path__ and os.path.realpath(path) == os.path.realpath(package.__path__[0]):
            package.__path__.append(path)


def _argv(cmd: List[str]) -> List[str]:
    if len(cmd) >= 3 and cmd[1] == "-m":
        return [cmd[2]] + cmd[3:]  # runpy sets argv[0] to the module's file
    if len(cmd) >= 3 and cmd[1] == "-c":
        return ["-c"] + cmd[3:]
    if len(cmd) >= 2 and cmd[1].endswith(".py"):
        return cmd[1:]
    return list(cmd)


def _child(function, cmd, cwd, env, stdin_fd, out_fd, err_fd) -> int:
    os.dup2(stdin_fd, 0)
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", line_buffering=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", line_buffering=True)
    sys.__stdout__, sys.__stderr__, sys.__stdin__ = sys.stdout, sys.stderr, sys.stdin
    new_paths = _new_paths(env) or []
    os.environ.clear()
    os.environ.update(env)
    sys.path[:0] = [p for p in new_paths if p not in sys.path]
    if cwd:
        os.chdir(cwd)
    sys.argv = _argv(cmd)
    _alias_user_dir(sys.argv)
    # a new Python's logging: no handler (pytest's are the parent's) and the root at WARNING. The programs'
    # modules are imported again, so that what they do on import (fairseq_cli's logging.basicConfig on stdout)
    # happens in this child as in a new process; the plugin itself stays (fairseq's registries hold it)
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)
    # and no level a test process set at run time (``outlayers-params`` quiets the model core's logger when it
    # runs in-process): every logger at the level its modules' import gave it
    logging.disable(logging.NOTSET)
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            logger.setLevel(_IMPORT_LEVELS.get(name, logging.NOTSET))
            logger.disabled = False
    for name in list(sys.modules):
        if name == "fairseq_cli" or name.startswith(FRESH_MODULES):
            del sys.modules[name]
    threads = os.environ.get("OMP_NUM_THREADS")
    if threads and "torch" in sys.modules and threads.isdigit():
        sys.modules["torch"].set_num_threads(int(threads))
    import faulthandler

    faulthandler.disable()  # pytest's: a new Python has none (os.abort() prints no "Fatal Python error")
    warnings.resetwarnings()
    if env.get("PYTHONWARNINGS") == "ignore":
        warnings.simplefilter("ignore")
    try:
        result = function()
        code = 0 if result is None else result
    except SystemExit as e:
        code = e.code
    except BaseException:  # what Python does with an uncaught exception
        traceback.print_exc()
        code = 1
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    return code


def leave(code: int) -> None:
    """The end of a child: its output flushed, then ``os._exit`` (no handler of the test process runs)."""
    try:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    finally:
        os._exit(code & 0xFF)


def run(function, cmd: List[str], cwd: Optional[str], env: Dict[str, str], timeout: float,
        input: Optional[str]) -> subprocess.CompletedProcess:
    """``cmd`` run by ``function`` in a fork; the result as ``subprocess.run(..., capture_output=True,
    text=True)`` gives it. Refused in a process that has initialised CUDA."""
    if cuda_initialised():
        raise RuntimeError(f"not forking {cmd[0]}: this process has initialised CUDA, which a fork cannot use; "
                           "run the command as a new process")
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as stdin:
        stdin.write((input or "").encode("utf-8"))
        stdin.flush()
        stdin.seek(0)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the test process
            code = 1
            try:
                code = _child(function, cmd, cwd, env, stdin.fileno(), out.fileno(), err.fileno())
            finally:
                leave(code)
        deadline = time.monotonic() + timeout
        delay = 0.005
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise subprocess.TimeoutExpired(cmd, timeout)
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
        returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(cmd, returncode, out.read().decode("utf-8", "replace"),
                                           err.read().decode("utf-8", "replace"))
