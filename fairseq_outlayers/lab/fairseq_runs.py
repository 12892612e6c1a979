"""Running fairseq's own command-line tools from the package's runners (compare, the ledger, the sweep scripts).

* ``run_training(cmd, log_path, what)``: one ``fairseq-train`` run, its output logged (appended to when the run
  resumes), progress echoed; an abort at interpreter exit after fairseq logged the end of training is not a
  failure;
* ``training_speed(log_path)``: training target tokens per second, from that log;
* ``validations(log_path)``: the figures of every validation in that log, one dict per epoch;
* ``epoch_seconds(log_path)``: the median wall time of one epoch (training and validation) in that log;
* ``parameter_counts(checkpoint)``: the parameter report of ``python -m fairseq_outlayers params``.
"""
import datetime
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time

from fairseq_outlayers.tools import commands

DONE_TRAINING = "done training in"  # fairseq_cli/train.py logs it once every checkpoint of the run is saved


def log(msg, prog="compare"):
    print(f"[{prog} {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run_training(cmd, log_path, what, prog="compare", append=False, label="", env=None):
    """Run a fairseq-train command, its output to ``log_path`` with progress lines echoed (after ``label``, which
    tells runs apart when several run at once); the wall seconds. ``append``: add to the log (a run resuming from
    its checkpoint keeps the log of its earlier epochs); ``env``: variables set for this run only (e.g. the GPU it
    may see)."""
    log("  " + " ".join(shlex.quote(c) for c in cmd), prog)
    start = time.time()
    with open(log_path, "a" if append else "w", buffering=1) as out:  # line-buffered: a killed runner loses no line
        # fairseq logs to stdout: unbuffered for live progress
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        proc = commands.start(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        finished = False
        for line in proc.stdout:
            out.write(line)
            finished = finished or DONE_TRAINING in line
            if "train_inner" in line or "valid on" in line:  # visible progress
                m = re.search(r"(num_updates=\d+|valid on.*?\| loss [\d.]+)", line)
                if m:
                    print(f"    {label}{m.group(1)}", flush=True)
        proc.wait()
    if proc.returncode == -signal.SIGABRT and finished:
        # fairseq's batch-prefetch thread (data/iterators.py BufferedIterator, a daemon thread) can still be inside
        # torch when the interpreter exits after a run stopped mid-epoch by --max-update, and the process aborts
        # ("terminate called without an active exception") after its last checkpoint was saved: the run is whole
        log(f"  fairseq-train aborted at exit after finishing ({DONE_TRAINING!r} logged) for {what}: "
            "its checkpoints are complete; carrying on", prog)
    elif proc.returncode != 0:
        raise SystemExit(f"{prog}: fairseq-train failed for {what}; see {log_path}")
    return time.time() - start


def training_speed(log_path):
    """Training target tokens per second: total target tokens / total training wall time, from the
    ``train_inner`` lines (wpb = target tokens per update, ups = updates per second over the interval)."""
    tokens = seconds = 0.0
    last_updates = 0
    with open(log_path, encoding="utf-8") as f:
        for line in f:
            resumed = RESUMED.search(line)
            if resumed:  # a resumed run counts its updates from the checkpoint it loaded
                last_updates = int(resumed.group(1))
                continue
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


#: fairseq.trainer's line when a run resumes: "Loaded checkpoint PATH (epoch 9 @ 1008 updates)"
RESUMED = re.compile(r"Loaded checkpoint .* \(epoch \d+ @ (\d+) updates\)")
#: one figure of a fairseq log line: "| name value"
FIGURE = re.compile(r"\| (\w+) ([-\d.e+]+|nan|inf)(?= \||$)")


def validations(log_path, subset="valid"):
    """[{"epoch": 3, "num_updates": 378.0, "loss": 4.9, "bleu": 30.1, ...}, ...]: the figures of each validation of
    ``subset`` in a fairseq-train log written with ``--log-format simple`` (the runners' format), in epoch order;
    an epoch validated twice (a run stopped during validation and resumed) keeps its last line."""
    by_epoch = {}
    with open(log_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if f"valid on '{subset}' subset" not in line:
                continue
            epoch = re.search(r"\| epoch (\d+) \|", line)
            if not epoch:
                continue
            number = int(epoch.group(1))
            values = {k: float(v) for k, v in FIGURE.findall(line.rstrip()) if k != "epoch"}
            by_epoch[number] = dict({"epoch": number}, **values)
    return [by_epoch[e] for e in sorted(by_epoch)]


STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) ")


def epoch_seconds(log_path, subset="valid"):
    """The median wall seconds from one validation of ``subset`` to the next epoch's, read from the time stamps of a
    fairseq-train log (training plus validation, on the machine and load the run had); intervals that span a
    resume are left out, as they hold the time the run was stopped. None below two validations in one stretch."""
    gaps, last = [], None  # last: (epoch, time) of the previous validation in this stretch of the log
    with open(log_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if RESUMED.search(line):
                last = None
                continue
            if f"valid on '{subset}' subset" not in line:
                continue
            stamp, epoch = STAMP.match(line), re.search(r"\| epoch (\d+) \|", line)
            if not (stamp and epoch):
                continue
            when = datetime.datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S")
            number = int(epoch.group(1))
            if last is not None and number == last[0] + 1:
                gaps.append((when - last[1]).total_seconds())
            last = (number, when)
    return statistics.median(gaps) if gaps else None


def parameter_counts(checkpoint, prog="compare"):
    proc = commands.run([sys.executable, "-m", "fairseq_outlayers", "params", checkpoint, "--json"])
    if proc.returncode != 0:
        raise SystemExit(f"{prog}: parameter report failed for {checkpoint}:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout[proc.stdout.index("{"):])
