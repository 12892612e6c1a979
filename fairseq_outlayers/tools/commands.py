"""Where fairseq's own programs and this plugin are, for the tools and the lab that run them as subprocesses."""
import os
import sys


def executable(name):
    """The ``fairseq-*`` program beside the running interpreter (the venv's), else the name (found on PATH)."""
    here = os.path.join(os.path.dirname(sys.executable), name)
    return here if os.path.exists(here) else name


def user_dir():
    """The ``--user-dir`` that loads this plugin: the ``fairseq_outlayers`` package directory."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
