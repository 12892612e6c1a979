"""The tests' commands on CUDA: never a fork of a process that has initialised CUDA, which torch refuses.

There is no GPU here, so an initialised CUDA is simulated: ``torch.cuda.is_initialized()`` made to say True, or a
library list naming the CUDA driver, as ``torch.cuda.is_available()`` leaves it. A command then runs in a new
Python (``_pytest`` is not imported there, as it is in a fork of a test process)."""
import os
import subprocess
import sys

import forked
import forkserver
import pytest
import torch
from harness import REPO, run

FORKED = "import sys; print('_pytest' in sys.modules)"


def started_by_fork(env=None) -> bool:
    return run([sys.executable, "-c", FORKED], env=env).stdout.strip() == "True"


@pytest.fixture
def cuda_initialised(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)


def test_a_command_is_a_new_python_once_cuda_is_initialised(cuda_initialised):
    assert not started_by_fork()
    with pytest.raises(RuntimeError, match="this process has initialised CUDA"):
        forked.run(lambda: None, ["fairseq-train"], None, dict(os.environ), 60, None)
    assert forkserver.environment(dict(os.environ)) == {}  # a script's commands: no stand-ins either


def test_the_cuda_driver_loaded_by_is_available_counts(tmp_path, monkeypatch):
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 00000000 08:01 12 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15\n")
    monkeypatch.setattr(forked, "MAPS", str(maps))
    assert forked.cuda_initialised() and not started_by_fork()


def test_commands_on_cuda_are_new_processes():
    if os.environ.get(forked.SUBPROCESS_ENV) == "1" or forked.cuda_initialised():
        pytest.skip("every command starts afresh here anyway")
    assert started_by_fork()
    assert not started_by_fork({"OUTLAYERS_TEST_DEVICE": "cuda"})  # as scripts/gpu_run.sh sets it
    assert not started_by_fork({"OUTLAYERS_CUDA_TEST_DEVICE": "cuda"})


def test_the_gpu_tests_train_and_translate_after_cuda_is_initialised(tmp_path):
    """tests/test_cuda.py as the GPU call runs it, on the CPU, in a test process whose CUDA is initialised from the
    start: the fork path would refuse its fairseq-train and fairseq-generate, so passing shows none was forked."""
    code = ("import sys, torch; torch.cuda.is_initialized = lambda: True; import pytest; sys.exit(pytest.main("
            "['-q', '-n', '0', '-p', 'no:cacheprovider', '--basetemp', sys.argv[1], "
            "'tests/test_cuda.py::test_every_method_trains_and_generates[softmax-ce-transformer]']))")
    env = dict(os.environ, OUTLAYERS_CUDA_TEST_DEVICE="cpu", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "t")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
