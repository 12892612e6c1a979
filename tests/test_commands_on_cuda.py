"""The tests' commands on CUDA: no test forks a process, which torch refuses once CUDA is initialised in it.

A command runs in the test process (``in_process.py``) or as a new process (``subprocess``, whose fork is followed
at once by ``exec``). There is no GPU here, so an initialised CUDA is simulated (``torch.cuda.is_initialized()``
made to say True) and ``os.fork`` made to fail: training and translating still pass."""
import os
import subprocess
import sys

import pytest
import torch
from harness import REPO, generate, train

REFUSE_FORK = ("import os, torch\n"
               "torch.cuda.is_initialized = lambda: True\n"
               "def refused(*args, **kwargs):\n"
               "    raise AssertionError('os.fork in a process whose CUDA is initialised')\n"
               "os.fork = refused\n")


@pytest.fixture
def cuda_initialised(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)

    def refused(*args, **kwargs):
        raise AssertionError("os.fork in a process whose CUDA is initialised")
    monkeypatch.setattr(os, "fork", refused)


def test_training_and_translating_never_fork(cuda_initialised, tiny_bin, tmp_path):
    save = str(tmp_path / "ck")
    train(tiny_bin, save, max_update=2)
    _, hyps = generate(tiny_bin, os.path.join(save, "checkpoint_last.pt"))
    assert len(hyps) == 24


def test_the_gpu_tests_train_and_translate_after_cuda_is_initialised(tmp_path):
    """tests/test_cuda.py as the GPU call runs it, on the CPU, in a pytest whose CUDA is initialised from the start
    and whose ``os.fork`` fails."""
    code = REFUSE_FORK + (
        "import sys, pytest\n"
        "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '--basetemp', sys.argv[1], "
        "'tests/test_cuda.py::test_every_method_trains_and_generates[softmax-ce-transformer]']))\n")
    env = dict(os.environ, OUTLAYERS_CUDA_TEST_DEVICE="cpu", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "t")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


#: a test that trains with a breakpoint() in fairseq's training step
STOPS = '''
import harness


def test_stops(tiny_bin, tmp_path, monkeypatch):
    from fairseq.trainer import Trainer

    step = Trainer.train_step

    def stopping(self, *args, **kwargs):
        breakpoint()
        return step(self, *args, **kwargs)
    monkeypatch.setattr(Trainer, "train_step", stopping)
    harness.train(tiny_bin, str(tmp_path / "ck"), max_update=1)
'''


FAILS = '''
import harness


def test_fails(tiny_bin, tmp_path, monkeypatch):
    from fairseq.trainer import Trainer

    def failing(self, *args, **kwargs):
        inside_fairseq_frame = "here"  # noqa: F841  (pdb prints it from the frame where the error was raised)
        raise RuntimeError("a fault inside fairseq")
    monkeypatch.setattr(Trainer, "train_step", failing)
    harness.train(tiny_bin, str(tmp_path / "ck"), max_update=1)
'''


def test_under_pdb_a_failing_command_opens_in_the_frame_that_raised_and_a_breakpoint_stops(tmp_path):
    """``pytest --pdb -p no:xdist`` on two test files, in one pytest: an exception inside fairseq-train (called in the
    test process) reaches pytest as it was raised, so the post-mortem debugger opens in that frame, not in the
    harness, and no watchdog ends pytest while the debugger waits (``in_process.DEBUGGING``); then a
    ``breakpoint()`` inside fairseq-train stops there and reads the debugger's commands from the terminal (here a
    pipe)."""
    (tmp_path / "test_fails.py").write_text(FAILS)
    (tmp_path / "test_stops.py").write_text(STOPS)
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "tests"), OMP_NUM_THREADS="1")
    env.pop("PYTHONBREAKPOINT", None)
    commands = "p 'frame: ' + inside_fairseq_frame\nc\np 'stopped in ' + type(self).__name__\nc\n"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "--pdb", "-p", "no:xdist", "-p", "no:randomly",
                           "-p", "no:cacheprovider", "-p", "conftest", "--rootdir", str(tmp_path),
                           "--basetemp", str(tmp_path / "t"), str(tmp_path / "test_fails.py"),
                           str(tmp_path / "test_stops.py")],
                          cwd=str(tmp_path), env=env, input=commands, capture_output=True, text=True, timeout=600)
    out = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "RuntimeError: a fault inside fairseq" in proc.stdout and "frame: here" in proc.stdout, out
    assert "stopped in Trainer" in proc.stdout, out
    assert "1 failed, 1 passed" in proc.stdout, out
    assert proc.stdout.index("frame: here") < proc.stdout.index("stopped in Trainer"), out
