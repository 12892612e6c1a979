"""Running fairseq's own command-line tools from the package's runners (compare, the ledger, the sweep scripts).

* ``executable(name)``: the ``fairseq-*`` program beside the running interpreter (the venv's), else from PATH;
* ``user_dir()``: the ``--user-dir`` that loads this package;
* ``run_training(cmd, log_path, what)``: one ``fairseq-train`` run, its output logged, progress echoed;
* ``training_speed(log_path)``: training target tokens per second, from that log;
* ``parameter_counts(checkpoint)``: the parameter report of ``python -m fairseq_outlayers params``.
"""
import json
import os
import re
import shlex
import subprocess
import sys
import time


def executable(name):
    here = os.path.join(os.path.dirname(sys.executable), name)
    return here if os.path.exists(here) else name


def user_dir():
    return os.path.dirname(os.path.abspath(__file__))


def log(msg, prog="compare"):
    print(f"[{prog} {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run_training(cmd, log_path, what, prog="compare"):
    """Run a fairseq-train command, its output to ``log_path`` with progress lines echoed; the wall seconds."""
    log("  " + " ".join(shlex.quote(c) for c in cmd), prog)
    start = time.time()
    with open(log_path, "w") as out:
        env = dict(os.environ, PYTHONUNBUFFERED="1")  # fairseq logs to stdout: unbuffered for live progress
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        for line in proc.stdout:
            out.write(line)
            if "train_inner" in line or "valid on" in line:  # visible progress
                m = re.search(r"(num_updates=\d+|valid on.*?\| loss [\d.]+)", line)
                if m:
                    print(f"    {m.group(1)}", flush=True)
        proc.wait()
    if proc.returncode != 0:
        raise SystemExit(f"{prog}: fairseq-train failed for {what}; see {log_path}")
    return time.time() - start


def training_speed(log_path):
    """Training target tokens per second: total target tokens / total training wall time, from the
    ``train_inner`` lines (wpb = target tokens per update, ups = updates per second over the interval)."""
    tokens = seconds = 0.0
    last_updates = 0
    with open(log_path, encoding="utf-8") as f:
        for line in f:
            if "train_inner" not in line:
                continue
            fields = dict(re.findall(r"(\w+)=([\d.]+)", line))
            if not {"wps", "wpb", "num_updates"} <= fields.keys():
                continue
            updates = int(fields["num_updates"]) - last_updates
            last_updates = int(fields["num_updates"])
            if float(fields["wps"]) == 0:  # fairseq reports 0 for the very first interval
                continue
            interval_tokens = float(fields["wpb"]) * updates
            tokens += interval_tokens
            seconds += interval_tokens / float(fields["wps"])
    return tokens / seconds if seconds else float("nan")


def parameter_counts(checkpoint, prog="compare"):
    proc = subprocess.run([sys.executable, "-m", "fairseq_outlayers", "params", checkpoint, "--json"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{prog}: parameter report failed for {checkpoint}:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout[proc.stdout.index("{"):])
