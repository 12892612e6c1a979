"""The README's "Train and translate" blocks and its "Serve" block run as written, read from README.md itself (so
the two cannot drift).

Each block runs in a directory laid out as ``make demo`` leaves the repository (``work/multi30k/...``), filled with
the tiny synthetic corpus of conftest.py. Only options are added (argparse: the last one wins): each
``fairseq-train`` stops after a few updates on a smaller model, fairseq runs on the CPU. A block's commands are
split as the shell splits them and called in the test process (``harness.run``: this venv's console scripts, the
``--user-dir`` the tree's link to the package); ``[ -s FILE ] ||`` is the one shell form they use, and another fails
the test. The "Serve" block runs in bash. The README's sentences are checked against their length limit here too
(scripts/check_sentences.py).
"""
import glob
import os
import re
import shlex
import shutil

import pytest

import in_process
from harness import BIN, REPO, load_script, run, train_args

README = os.path.join(REPO, "README.md")

#: appended to every fairseq-train of a block: a few updates of a small model on the CPU (argparse: last wins)
TRAIN_CAP = ["--max-update", "3", "--cpu", "--num-workers", "0", "--data-buffer-size", "0", "--seed", "1",
             "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
             "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2",
             "--decoder-attention-heads", "2", "--max-tokens", "600", "--no-epoch-checkpoints",
             "--no-progress-bar", "--log-format", "simple"]
#: batches of 5 sentences: without the README's --required-batch-size-multiple 1, fairseq would drop the last 4
GENERATE_CAP = ["--cpu", "--num-workers", "0", "--batch-size", "5", "--max-len-b", "12"]


def readme_blocks():
    """(title, shell text) of every ```bash block in the README's "Train and translate" section."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    section = text.split("\n## Train and translate\n", 1)[1].split("\n## ", 1)[0]
    out = []
    title = None
    for m in re.finditer(r"^\*\*(.+?)\*\*|^```bash\n(.*?)^```", section, re.S | re.M):
        if m.group(1):
            title = m.group(1)
        else:
            out.append((title, m.group(2)))
    return out


def commands(block):
    """The block's commands, one string each (backslash continuations joined)."""
    return [c.strip() for c in re.sub(r"\\\n\s*", " ", block).splitlines() if c.strip()
            and not c.strip().startswith("#")]


def test_the_readme_has_a_block_per_method():
    blocks = readme_blocks()
    text = "\n".join(b for _, b in blocks)
    with open(README, encoding="utf-8") as f:
        section = f.read().split("\n## Train and translate\n", 1)[1].split("\n## ", 1)[0]
    titles = re.findall(r"^\*\*(.+?)\*\*", section, re.M)
    # one block under each bold title of the section, and no block without one (counted from the README itself)
    assert blocks and [t for t, _ in blocks] == titles
    for option in ("--output-layer joint", "--output-layer fixed", "--embeddings shared-private",
                   "--output-layer continuous"):
        assert sum(option in b for _, b in blocks) == 1, option
    assert "--output-layer tied" in blocks[0][1]
    assert "outlayers-pairing" in text and "outlayers-vectors export" in text
    for _, block in blocks:
        cmds = commands(block)
        trains = [c for c in cmds if c.startswith("fairseq-train ")]
        gens = [c for c in cmds if c.startswith("fairseq-generate ")]
        assert len(gens) == 1 and cmds[-1] == gens[0], block
        assert all("--user-dir fairseq_outlayers" in c for c in trains + gens)
        if len(trains) == 2:  # two stages: the first (converged) model's output matrix is the second's target vectors
            first = re.search(r"--save-dir (\S+)", trains[0]).group(1)
            export = [c for c in cmds if c.startswith("outlayers-vectors export ")]
            assert len(export) == 1 and export[0].split()[2] == f"{first}/checkpoint_best.pt", block  # converged
            assert f"--target-vectors {export[0].split()[3]} " in trains[1] and "--output-layer continuous" in trains[1]
        assert 1 <= len(trains) <= 2, block
        save = re.search(r"--save-dir (\S+)", trains[-1]).group(1)
        assert f"--path {save}/checkpoint_best.pt" in gens[0]
        # the data the block trains on is the data it translates
        assert all(c.split()[1] == gens[0].split()[1] for c in trains)


def test_user_docs_sentences_are_short():
    """README.md: at most 40 words a sentence; docs/*.md, the notes and the benchmark pages: at most 60 (tables,
    code and headings excepted)."""
    check = load_script("check_sentences.py")
    assert check.check(README, 40) == []
    docs = sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
    notes = sorted(glob.glob(os.path.join(REPO, "docs", "notes", "*.md")))
    pages = sorted(glob.glob(os.path.join(REPO, "docs", "benchmarks", "*.md")))
    assert len(docs) >= 10 and notes and pages
    assert [p for path in docs + notes + pages for p in check.check(path, 60)] == []
    # the script's own default covers the same files
    assert {pattern for pattern, _ in check.LIMITS} >= {"README.md", "docs/*.md", "docs/notes/*.md",
                                                        "docs/benchmarks/*.md"}
    # the checker itself: a long sentence is found, a table row or code line is not
    text = "One " + "word " * 45 + "end.\n\n| " + "cell " * 80 + "|\n\n```\n" + "code " * 80 + "\n```\n"
    assert [n for _, n, _ in check.sentences(text)] == [47]
    # a benchmark page's command line is code; the prose after it still counts
    page = "Command: `python x.py " + "--opt " * 70 + "`  \nDate: 2026-12-04; " + "word " * 61 + "end.\n"
    assert [n for _, n, _ in check.sentences(page)] == [64]


@pytest.fixture(scope="module")
def demo_tree(tiny_raw, tiny_bin, tmp_path_factory):
    """A directory laid out as the repository after ``make demo``: work/multi30k/{data-bin/de-en,
    data-bin/de-en-word, bpe, tok}, with the package and scripts where the README's relative paths expect them."""
    root = tmp_path_factory.mktemp("readme")
    m30k = root / "work" / "multi30k"
    for name in ("de-en", "de-en-word"):
        shutil.copytree(tiny_bin, m30k / "data-bin" / name)
    for sub in ("bpe", "tok"):
        (m30k / sub).mkdir(parents=True)
        for lang in ("de", "en"):
            shutil.copy(os.path.join(tiny_raw, f"train.{lang}"), m30k / sub / f"train.{lang}")
    os.symlink(os.path.join(REPO, "fairseq_outlayers"), root / "fairseq_outlayers")
    os.symlink(os.path.join(REPO, "scripts"), root / "scripts")
    return root


#: ``[ -s FILE ] || COMMAND``: COMMAND runs unless FILE exists and is not empty (the one shell form the blocks use)
UNLESS_FILLED = re.compile(r"^\[ -s (\S+) \] \|\| (.+)$")


def _block_argvs(block, root):
    """Each command of the block as the shell would split it, with the test's options added; a command under
    ``[ -s FILE ] ||`` only when FILE (under ``root``) is missing or empty. Any other shell form fails the test."""
    argvs = []
    for cmd in commands(block):
        match = UNLESS_FILLED.match(cmd)
        if match:
            if (root / match.group(1)).is_file() and (root / match.group(1)).stat().st_size:
                continue
            cmd = match.group(2)
        argv = shlex.split(cmd)
        assert not set(argv) & {"|", "||", "&&", ";", ">", "<", "&"} and "$" not in cmd, \
            f"a README command this test cannot run: {cmd}"
        if argv[0] == "fairseq-train":
            argv += TRAIN_CAP
        elif argv[0] == "fairseq-generate":
            argv += GENERATE_CAP
        argvs.append(argv)
    return argvs


def _block_params():
    params = []
    for title, block in readme_blocks():
        name = re.sub(r"\W+", "-", title.split(":")[0]).strip("-").lower()
        params.append(pytest.param(title, block, id=name))
    return params


@pytest.mark.parametrize("title,block", _block_params())
def test_readme_block_runs(title, block, demo_tree):
    if "outlayers-pairing" in block:
        pytest.importorskip("systran_align", reason="the pairing's built-in fast_align (Python <= 3.11)")
    # each command as the shell runs it, in the tree's folder: a console script of this venv, called in this process
    # (harness.run), its --user-dir the tree's link to the package
    for argv in _block_argvs(block, demo_tree):
        assert argv[0] in in_process.ENTRIES, argv
        proc = run([os.path.join(BIN, argv[0])] + argv[1:], cwd=str(demo_tree), timeout=900)
    hyps = re.findall(r"^H-\d+\t", proc.stdout, re.M)
    assert len(hyps) == 24, proc.stdout[-2000:]  # every test sentence of the tiny corpus is translated


def test_the_readme_serve_block_runs(tiny_raw, tiny_bin, tmp_path):
    """The block runs as written in a tree laid out as after `make demo` and the README's tied training."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        section = f.read().split("\n## Serve\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```bash\n(.*?)^```", section, re.S | re.M)
    assert len(blocks) == 1 and blocks[0].startswith("outlayers-export checkpoints/tied/checkpoint_best.pt ")
    root = tmp_path
    (root / "work" / "multi30k" / "bpe").mkdir(parents=True)
    os.symlink(tiny_bin, root / "work" / "multi30k" / "data-bin")
    with open(os.path.join(tiny_raw, "test.de"), encoding="utf-8") as f:
        source = f.read()
    (root / "work" / "multi30k" / "bpe" / "test_2016_flickr.de").write_text(source, encoding="utf-8")
    run([os.path.join(BIN, "fairseq-train")] + train_args(tiny_bin, str(root / "checkpoints" / "tied"),
                                                          extra=["--output-layer", "tied"], max_update=3))
    tied = root / "checkpoints" / "tied"
    os.rename(tied / "checkpoint_last.pt", tied / "checkpoint_best.pt")
    script = root / "serve.sh"
    script.write_text("set -euo pipefail\n" + blocks[0])
    env = {"PATH": BIN + os.pathsep + os.environ.get("PATH", "")}
    proc = run(["bash", str(script)], cwd=str(root), env=env)
    report, *translations = proc.stdout.splitlines()
    assert report.startswith("wrote serve/tied: a CTranslate2 model (int8)")
    assert len(translations) == len(source.splitlines()) == 24
