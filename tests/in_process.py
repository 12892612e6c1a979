"""A command of the tests called in the test process, as fairseq's own tests call ``train.main`` (fairseq's
``tests/utils.py``): no second start of Python, torch and fairseq, and ``breakpoint()`` / ``pytest --pdb -p
no:xdist`` stop inside it.

``program(cmd, env)`` says whether a command can be called here: a console script of this venv named in
``ENTRIES`` (the table of entry functions), ``python -m`` a module of fairseq or this package, or ``python
SCRIPT.py``. Anything else is a real process (a shell
script, ``python -c``, another program), and so is a command whose environment changes what Python imports, one
with another ``--user-dir`` (its registrations would stay in this process), ``fairseq-hydra-train`` (Hydra's
global state) and every command when ``OUTLAYERS_TEST_SUBPROCESS=1``.

``call`` gives the command its argv, environment, working directory, standard input, output and error, and
catches its exit as ``subprocess.run(..., capture_output=True, text=True)`` reports it. Afterwards it puts back
what a command may change in this process: those, the loggers, the warning filters, and torch's random state,
default dtype and thread count.
"""
import contextlib
import faulthandler
import importlib
import io
import logging
import os
import random
import runpy
import subprocess
import sys
import traceback
import warnings
from typing import Callable, Dict, List, Optional

from fairseq_outlayers import USER_DIR
from fairseq_outlayers.command_line import option_value

SUBPROCESS_ENV = "OUTLAYERS_TEST_SUBPROCESS"
#: the console scripts called in this process, each with the function it runs: its entry point in fairseq's and
#: this package's setup.py (``test_ci.py`` holds the table to the installed metadata). Any other program is a real
#: process, fairseq-hydra-train among them (Hydra keeps global state between calls).
ENTRIES = {
    "fairseq-preprocess": "fairseq_cli.preprocess:cli_main",
    "fairseq-train": "fairseq_cli.train:cli_main",
    "fairseq-generate": "fairseq_cli.generate:cli_main",
    "fairseq-interactive": "fairseq_cli.interactive:cli_main",
    "fairseq-validate": "fairseq_cli.validate:cli_main",
    "fairseq-eval-lm": "fairseq_cli.eval_lm:cli_main",
    "fairseq-score": "fairseq_cli.score:cli_main",
    "outlayers-train": "fairseq_outlayers.tools.wrappers:train",
    "outlayers-generate": "fairseq_outlayers.tools.wrappers:generate",
    "outlayers-interactive": "fairseq_outlayers.tools.wrappers:interactive",
    "outlayers-validate": "fairseq_outlayers.tools.wrappers:validate",
    "outlayers-params": "fairseq_outlayers.tools.params:main",
    "outlayers-fit-bias": "fairseq_outlayers.tools.fit_bias:main",
    "outlayers-pairing": "fairseq_outlayers.tools.pairing.__main__:main",
    "outlayers-vectors": "fairseq_outlayers.tools.vectors:main",
    "outlayers-options": "fairseq_outlayers.tools.options:main",
    "outlayers-export": "fairseq_outlayers.tools.export:main",
}
#: ``python -m M`` is called here when M is a module of these packages, or this package itself (its ``__main__``:
#: ``python -m fairseq_outlayers params ...``); ``python SCRIPT.py`` always is
CALLED = ("fairseq_cli.", "fairseq_outlayers.")
PACKAGE = "fairseq_outlayers"
#: environment variables that change what a new Python imports: this process could not honour them
IMPORT_ENV = ("PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH", "PYTHONNOUSERSITE", "PYTHONUSERBASE",
              "PYTHONEXECUTABLE")
#: programs whose fairseq_cli module configures logging when imported (fairseq's INFO lines on stdout); it was
#: imported once in this process, so each call here is configured the same way
FAIRSEQ_LOGGING = {"fairseq-train", "fairseq-preprocess", "fairseq-interactive", "fairseq-validate",
                   "fairseq-eval-lm", "outlayers-train", "outlayers-interactive", "outlayers-validate"}
LOG_FORMAT = "%(asctime)s | %(levelname)s | %(name)s | %(message)s"
#: the folder holding the package: a ``PYTHONPATH`` entry that changes no import of the package
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def program(cmd: List[str], bin_dir: str, env: Dict[str, str],
            cwd: Optional[str] = None) -> Optional[Callable[[], object]]:
    """The function that runs ``cmd`` (in ``cwd``) in this process, or None when it needs a process of its own."""
    if not cmd or env.get(SUBPROCESS_ENV) == "1" or not _same_imports(env) or _other_user_dir(cmd, cwd):
        return None
    first = cmd[0]
    if os.path.abspath(first) in (os.path.abspath(sys.executable), os.path.join(bin_dir, "python")):
        if len(cmd) >= 3 and cmd[1] == "-m" and (cmd[2].startswith(CALLED) or cmd[2] == PACKAGE):
            module = cmd[2]
            return lambda: _run_module(module)
        if len(cmd) >= 2 and cmd[1].endswith(".py") and os.path.isfile(cmd[1]):
            path = cmd[1]
            return lambda: _run_path(path)
        return None
    name = os.path.basename(first)
    if os.path.dirname(first) not in ("", bin_dir) or name not in ENTRIES:
        return None
    module, _, attr = ENTRIES[name].partition(":")

    def console_script():
        function = importlib.import_module(module)
        for part in attr.split("."):
            function = getattr(function, part)
        return function()
    return console_script


def _run_module(module: str) -> None:
    sys.path.insert(0, os.getcwd())  # as ``python -m`` puts it first
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def _run_path(path: str) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))  # as ``python SCRIPT`` puts it first
    runpy.run_path(path, run_name="__main__")


def _same_imports(env: Dict[str, str]) -> bool:
    """Whether a new Python with ``env`` would import what this process has: the same import variables, and a
    ``PYTHONPATH`` whose entries are on ``sys.path`` already (or hold the package)."""
    if any(env.get(k) != os.environ.get(k) for k in IMPORT_ENV):
        return False
    if env.get("PYTHONPATH") == os.environ.get("PYTHONPATH"):
        return True
    known = {os.path.realpath(p) for p in sys.path if p} | {os.path.realpath(PACKAGE_ROOT)}
    return all(os.path.realpath(p) in known for p in (env.get("PYTHONPATH") or "").split(os.pathsep) if p)


def _other_user_dir(cmd: List[str], cwd: Optional[str] = None) -> bool:
    """A ``--user-dir`` (relative to the command's ``cwd``) other than this package's folder, or a link to it:
    importing it here would register its classes in this process for every later test."""
    path = option_value(cmd, "--user-dir")
    return path is not None and os.path.realpath(os.path.join(cwd or os.getcwd(), path)) != os.path.realpath(USER_DIR)


def _known_user_dir(cmd: List[str]) -> None:
    """A ``--user-dir`` that reaches this package by another path (a link to it): fairseq's own memo of the
    folders it has imported (``import_user_module.memo``, put back after the call) holds that path too. A new
    Python would import the package from there; this process has it already (fairseq would refuse the second name
    as "not globally unique")."""
    path = option_value(cmd, "--user-dir")
    if path is not None and os.path.abspath(path) != USER_DIR:
        from fairseq.utils import import_user_module

        import_user_module.memo = getattr(import_user_module, "memo", set()) | {os.path.abspath(path)}


def _argv(cmd: List[str]) -> List[str]:
    if len(cmd) >= 3 and cmd[1] == "-m":
        return [cmd[2]] + cmd[3:]  # runpy sets argv[0] to the module's file
    if len(cmd) >= 2 and cmd[1].endswith(".py"):
        return cmd[1:]
    return list(cmd)


class _Output(io.TextIOWrapper):
    """A text stream with a ``buffer``, as a process's standard output has."""

    def __init__(self):
        super().__init__(io.BytesIO(), encoding="utf-8", errors="replace", line_buffering=True)

    def text(self) -> str:
        self.flush()
        return self.buffer.getvalue().decode("utf-8", "replace")


@contextlib.contextmanager
def _kept_state():
    """What a command may change in this process, put back when it ends."""
    import numpy as np
    import torch

    argv, environ, cwd, path = sys.argv, dict(os.environ), os.getcwd(), list(sys.path)
    streams = (sys.stdin, sys.stdout, sys.stderr)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    loggers = {name: (logger.level, logger.disabled) for name, logger in logging.root.manager.loggerDict.items()
               if isinstance(logger, logging.Logger)}
    disabled = logging.root.manager.disable
    rng = (torch.get_rng_state(), random.getstate(), np.random.get_state())
    dtype, threads, grad = torch.get_default_dtype(), torch.get_num_threads(), torch.is_grad_enabled()
    remembered = {function: dict(vars(function)) for function in _remembering()}
    try:
        with warnings.catch_warnings():
            yield
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
                handler.close()
        root.handlers[:] = handlers
        root.setLevel(level)
        logging.disable(disabled)
        for name, logger in logging.root.manager.loggerDict.items():
            if isinstance(logger, logging.Logger):
                logger.level, logger.disabled = loggers.get(name, (logging.NOTSET, False))
        logging.root.manager._clear_cache()
        sys.stdin, sys.stdout, sys.stderr = streams
        sys.argv, sys.path[:] = argv, path
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(cwd)
        torch.set_rng_state(rng[0])
        random.setstate(rng[1])
        np.random.set_state(rng[2])
        torch.set_default_dtype(dtype)
        torch.set_num_threads(threads)
        torch.set_grad_enabled(grad)
        for function, attributes in remembered.items():
            vars(function).clear()
            vars(function).update(attributes)


def _remembering():
    """fairseq's functions that keep a run's state as their own attributes, which a new process starts without:
    the best validation score (``save_checkpoint.best``, which picks checkpoint_best.pt), ``--patience``'s count
    (``should_stop_early.best`` / ``.num_runs``) and the user folders imported (``import_user_module.memo``)."""
    from fairseq import checkpoint_utils, utils
    from fairseq_cli import train

    return [checkpoint_utils.save_checkpoint, train.should_stop_early, utils.import_user_module]


def popen(real):
    """``subprocess.Popen`` for a test whose code under test starts commands itself (the lab's runners): a command
    ``program`` accepts is called here when it is made, with ``timeout`` 600 s; any other starts as ``real``
    (``subprocess.Popen`` as the test found it) would start it."""
    def start(args, *positional, stdin=None, stdout=None, stderr=None, env=None, cwd=None, text=None,
              universal_newlines=None, **kw):
        cmd = [args] if isinstance(args, (str, bytes)) else [str(a) for a in args]
        given = dict(os.environ if env is None else env)
        function = None if positional or kw.get("shell") or stdin not in (None, subprocess.DEVNULL) else program(
            cmd, os.path.dirname(sys.executable), given, cwd)
        if function is None:
            return real(args, *positional, stdin=stdin, stdout=stdout, stderr=stderr, env=env, cwd=cwd, text=text,
                        universal_newlines=universal_newlines, **kw)
        done = call(function, cmd, cwd, given, 600, None)
        return Finished(done, stdout, stderr, bool(text or universal_newlines))
    return start


class Finished:
    """A command called by ``popen``, already ended, as ``subprocess.Popen`` shows one: ``stdout``/``stderr`` to
    read when they were pipes (error joined to output with ``stderr=STDOUT``), ``wait``, ``poll``,
    ``communicate``."""

    def __init__(self, done: subprocess.CompletedProcess, stdout, stderr, text: bool):
        self.args, self.returncode, self.pid = done.args, done.returncode, None
        out, err = done.stdout, done.stderr
        if stderr == subprocess.STDOUT:
            out, err = out + err, ""
            stderr = None
        self._out = self._deliver(out, stdout, sys.stdout)
        self._err = self._deliver(err, stderr, sys.stderr)
        self.stdout = None if self._out is None else self._stream(self._out, text)
        self.stderr = None if self._err is None else self._stream(self._err, text)

    @staticmethod
    def _deliver(data: str, where, default):
        """The text kept for a pipe; written where the caller asked otherwise."""
        if where == subprocess.PIPE:
            return data
        if where is None:
            default.write(data)
        elif isinstance(where, int) and where >= 0:
            os.write(where, data.encode("utf-8"))
        elif hasattr(where, "write"):
            where.write(data if "b" not in getattr(where, "mode", "") else data.encode("utf-8"))
        return None

    @staticmethod
    def _stream(data: str, text: bool):
        return io.StringIO(data) if text else io.BytesIO(data.encode("utf-8"))

    def wait(self, timeout=None):
        return self.returncode

    def poll(self):
        return self.returncode

    def communicate(self, input=None, timeout=None):
        return tuple(None if stream is None else stream.read() for stream in (self.stdout, self.stderr))

    def kill(self):
        pass

    terminate = kill

    def send_signal(self, number):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


#: set by conftest.py under ``pytest --pdb`` / ``--trace``: no watchdog ends the process while a person debugs
DEBUGGING = False


def call(function: Callable[[], object], cmd: List[str], cwd: Optional[str], env: Dict[str, str], timeout: float,
         input: Optional[str], reraise: bool = False) -> subprocess.CompletedProcess:
    """``cmd`` run by ``function`` here; the result as ``subprocess.run(..., capture_output=True, text=True)``
    gives it. A command still running after ``timeout`` seconds ends the test process with every thread's
    traceback (``faulthandler``): nothing else can stop a call; not under a debugger (``DEBUGGING``).
    ``reraise``: an exception of the command reaches the caller as it was raised (after the state is put back),
    so pytest reports, and ``pytest --pdb`` opens, the frame inside fairseq where it happened."""
    out, err = _Output(), _Output()
    with _kept_state():
        os.environ.clear()
        os.environ.update(env)
        if cwd:
            os.chdir(cwd)
        sys.argv = _argv(cmd)
        sys.stdin = io.TextIOWrapper(io.BytesIO((input or "").encode("utf-8")), encoding="utf-8")
        sys.stdout, sys.stderr = out, err
        root = logging.getLogger()
        for handler in list(root.handlers):  # pytest's: a new Python has none
            root.removeHandler(handler)
        root.setLevel(logging.WARNING)
        if os.path.basename(cmd[0]) in FAIRSEQ_LOGGING:
            logging.basicConfig(format=LOG_FORMAT, datefmt="%Y-%m-%d %H:%M:%S", stream=out,
                                level=env.get("LOGLEVEL", "INFO").upper())
        if env.get("PYTHONWARNINGS") == "ignore":
            warnings.simplefilter("ignore")
        threads = env.get("OMP_NUM_THREADS", "")
        if threads.isdigit():
            import torch

            torch.set_num_threads(int(threads))
        _known_user_dir(cmd)
        if not DEBUGGING:
            faulthandler.dump_traceback_later(timeout, exit=True, file=sys.__stderr__)
        try:
            code = function()  # a console script exits with what its function returns
        except SystemExit as e:
            code = e.code
        except Exception:  # what Python does with an uncaught exception
            if reraise:
                raise
            traceback.print_exc()
            code = 1
        finally:
            faulthandler.cancel_dump_traceback_later()
        if code is None:
            code = 0
        elif not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
    return subprocess.CompletedProcess(cmd, code, out.text(), err.text())
