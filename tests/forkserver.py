"""The commands a shell script of the tests starts, served by forks of a process that has imported torch,
fairseq and the plugin once.

``forked.py`` runs a command the tests start themselves in a fork. A script such as ``scripts/train.sh`` starts
its own ``fairseq-train``, ``python -m ...`` and ``outlayers-vectors``: each would import torch and fairseq again,
most of a recipe test's time. So ``harness.run`` gives such a script a folder of stand-ins first on its ``PATH``
(and as ``VENV_BIN``, which the scripts put first themselves). Each stand-in is a few lines of Python started with
``-I -S`` (no site, a few milliseconds): it hands its argv, environment, working directory and its standard input,
output and error (the file descriptors themselves) to the server, which forks a child that runs the command as
``forked.py`` does. Signals sent to the stand-in reach the child; the child's exit status, or the signal that
ended it, becomes the stand-in's. A command a fork cannot stand in for (``forked.target`` says which) the stand-in
runs itself with ``execv``, so a script sees the real program either way. Every other program of the venv is a
symbolic link in that folder.

The server is a fork of the test process made at the first script a test starts. It leaves when that process is
gone. ``OUTLAYERS_TEST_SUBPROCESS=1`` (every command afresh) turns it off, and so do CUDA as the tests' device and a
test process that has initialised CUDA (``forked.fork_allowed``).
"""
import atexit
import json
import os
import select
import signal
import socket
import stat
import struct
import sys
import tempfile
from typing import Dict, Optional

import forked

ADDRESS_ENV = "OUTLAYERS_TEST_FORKSERVER"
#: the names a stand-in answers for: the console scripts a fork can run, and Python itself
PYTHONS = ("python", "python3", f"python{sys.version_info[0]}.{sys.version_info[1]}")

#: the stand-in: {python} and {real} are filled in; it imports nothing beyond the standard library
CLIENT = r'''#!{python} -IS
import json, os, signal, socket, struct, sys
REAL = {real!r}


def itself():
    os.execv(REAL, [REAL] + sys.argv[1:])


address = os.environ.get({env!r})
if not address:
    itself()
try:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.connect(address)
except OSError:
    itself()
request = json.dumps({{"cmd": [REAL] + sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}}).encode()
socket.send_fds(server, [struct.pack("!I", len(request)) + request], [0, 1, 2])
replies = server.makefile("rb")
first = replies.readline().split()
if not first or first[0] != b"pid":
    server.close()
    itself()
child = int(first[1])


def forward(number, frame):
    try:
        os.kill(child, number)
    except ProcessLookupError:
        pass


for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(number, forward)
last = replies.readline().split()
if not last:
    os._exit(1)
if last[0] == b"signal":
    signal.signal(int(last[1]), signal.SIG_DFL)
    os.kill(os.getpid(), int(last[1]))
os._exit(int(last[1]))
'''

_server: Optional[Dict[str, object]] = None


def environment(env: Dict[str, str]) -> Dict[str, str]:
    """What ``env`` (a script's environment) gains so that its commands are served by forks: the address, the
    stand-ins first on ``PATH`` and as ``VENV_BIN`` (unless the test set one). Nothing when commands must start
    afresh or no fork is possible."""
    if not hasattr(socket, "send_fds") or not forked.fork_allowed(env):
        return {}
    server = _start()
    added = {ADDRESS_ENV: server["address"],
             "PATH": server["bin"] + os.pathsep + forked_bin() + os.pathsep + env.get("PATH", "")}
    if "VENV_BIN" not in env:
        added["VENV_BIN"] = server["bin"]
    return added


def command(cmd, env: Dict[str, str]):
    """``cmd`` started through its stand-in when ``env`` (from ``environment``) has one: this venv's Python or
    one of its programs. For a test that starts processes itself (``subprocess.Popen``), side by side."""
    folder = env.get("VENV_BIN")
    if not folder or ADDRESS_ENV not in env:
        return list(cmd)
    program = os.path.abspath(cmd[0]) if os.sep in cmd[0] else cmd[0]
    name = "python" if program == os.path.abspath(sys.executable) else os.path.basename(program)
    if os.path.dirname(program) not in ("", forked_bin()) and name != "python":
        return list(cmd)
    stand_in = os.path.join(folder, name)
    return [stand_in] + list(cmd[1:]) if os.path.exists(stand_in) else list(cmd)


def forked_bin() -> str:
    return os.path.dirname(sys.executable)


def _stand_ins(folder: str) -> None:
    real_bin = forked_bin()
    scripts = forked._console_scripts()
    for name in sorted(os.listdir(real_bin)):
        path = os.path.join(folder, name)
        real = os.path.join(real_bin, name)
        module = scripts.get(name, "").partition(":")[0]
        serves = name in PYTHONS or (name not in forked.NOT_FORKED and module.startswith(forked.FORKABLE))
        if not serves:
            os.symlink(real, path)
            continue
        real = os.path.abspath(sys.executable) if name in PYTHONS else real
        with open(path, "w", encoding="utf-8") as f:
            f.write(CLIENT.format(python=os.path.abspath(sys.executable), real=real, env=ADDRESS_ENV))
        os.chmod(path, 0o755)


def _start() -> Dict[str, object]:
    global _server
    if _server is not None and _server["owner"] == os.getpid():
        return _server
    folder = tempfile.mkdtemp(prefix="outlayers-forkserver-")
    bin_dir = os.path.join(folder, "bin")
    os.mkdir(bin_dir)
    _stand_ins(bin_dir)
    address = os.path.join(folder, "socket")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    owner = os.getpid()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            _serve(listener, owner)
        except BaseException:  # never back into the test process
            code = 1
        finally:
            os._exit(code)
    listener.close()
    _server = {"pid": pid, "address": address, "bin": bin_dir, "folder": folder, "owner": owner}
    atexit.register(_stop, pid, folder)
    return _server


def _stop(pid: int, folder: str) -> None:
    import shutil

    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
    shutil.rmtree(folder, ignore_errors=True)


def _detach(listener: socket.socket) -> None:
    """The server keeps no pipe or socket of the test process (pytest-xdist talks to its workers through them: a
    copy held here would hide a worker's end) and no standard stream."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    for name in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else []:
        fd = int(name)
        if fd <= 2 or fd == listener.fileno():
            continue
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            continue
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            os.close(fd)


def _receive(conn: socket.socket):
    """(request, [stdin, stdout, stderr]) of one stand-in."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    while len(data) < 4:
        more = conn.recv(1 << 20)
        if not more:
            raise EOFError
        data += more
    size = struct.unpack("!I", data[:4])[0]
    data = data[4:]
    while len(data) < size:
        more = conn.recv(1 << 20)
        if not more:
            raise EOFError
        data += more
    return json.loads(data.decode("utf-8")), fds


def _serve(listener: socket.socket, owner: int) -> None:
    _detach(listener)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    children: Dict[int, socket.socket] = {}  # pid -> the stand-in's connection
    while os.getppid() == owner:
        readable, _, _ = select.select([listener] + list(children.values()), [], [], 0.05)
        for ready in readable:
            if ready is listener:
                conn, _ = listener.accept()
                _answer(conn, listener, children)
            else:  # a stand-in gone before its child: the child goes too, as a killed script's command would not
                # (but nothing would read its output any more)
                for pid, conn in list(children.items()):
                    if conn is ready and not conn.recv(1, socket.MSG_PEEK):
                        _kill(pid)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is None:
                continue
            reply = (f"signal {os.WTERMSIG(status)}\n" if os.WIFSIGNALED(status)
                     else f"exit {os.waitstatus_to_exitcode(status)}\n")
            try:
                conn.sendall(reply.encode())
            except OSError:
                pass
            conn.close()
    for pid in children:
        _kill(pid)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _answer(conn: socket.socket, listener: socket.socket, children: Dict[int, socket.socket]) -> None:
    fds = []
    try:
        request, fds = _receive(conn)
        cmd, env, cwd = request["cmd"], request["env"], request["cwd"]
        function = forked.target(cmd, forked_bin(), env) if len(fds) == 3 else None
    except (OSError, EOFError, ValueError, KeyError):
        function = None
    if function is None:
        for fd in fds:
            os.close(fd)
        try:
            conn.sendall(b"exec\n")
        except OSError:
            pass
        conn.close()
        return
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            listener.close()
            for other in children.values():
                other.close()
            conn.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            code = forked._child(function, cmd, cwd, env, *fds)
        finally:
            forked.leave(code)
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(f"pid {pid}\n".encode())
    except OSError:
        _kill(pid)
    children[pid] = conn
