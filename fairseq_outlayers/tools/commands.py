"""Where fairseq's own programs and this plugin are, and the one way the tools and the lab start them.

``start`` and ``run`` start every fairseq or package command of the tools and the lab (training runs, decodes,
parameter reports). They go through ``STARTER``, ``subprocess.Popen`` unless a caller injects another one (the
tests inject one that calls an accepted command in the test process): nothing patches ``subprocess`` itself.
"""
import os
import subprocess
import sys

#: what starts a command: ``subprocess.Popen`` or a replacement with its signature (injected by the tests)
STARTER = subprocess.Popen


def start(cmd, **popen_kwargs):
    """``cmd`` started as ``subprocess.Popen(cmd, **popen_kwargs)`` would start it, through ``STARTER``."""
    return STARTER(cmd, **popen_kwargs)


def run(cmd, env=None, cwd=None) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)`` through ``STARTER``."""
    proc = start(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    out, err = proc.communicate()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def executable(name):
    """The ``fairseq-*`` program beside the running interpreter (the venv's), else the name (found on PATH)."""
    here = os.path.join(os.path.dirname(sys.executable), name)
    return here if os.path.exists(here) else name


