"""Every sentence is scored: fairseq 0.12 builds batches of a multiple of ``--required-batch-size-multiple``
sentences (8 by default) and drops a last batch that is not one (fairseq's GitHub thread 5036). ``outlayers-generate`` and
``outlayers-validate`` pass ``--required-batch-size-multiple 1`` unless it is given, and every documented command
that translates or validates a set passes it. On the tiny corpus (24 sentences a split), batches of 5 sentences
show it: fairseq drops the last 4."""
import glob
import os
import re

import pytest

from harness import REPO, USER_DIR, generate, run, tool, train

FLAG = "--required-batch-size-multiple 1"


@pytest.fixture(scope="module")
def checkpoint(tiny_bin, tmp_path_factory):
    save = str(tmp_path_factory.mktemp("every-sentence"))
    train(tiny_bin, save, extra=["--output-layer", "tied"], max_update=2)
    return os.path.join(save, "checkpoint_last.pt")


@pytest.mark.parametrize("extra", [[], ["--replace-unk"]], ids=["plain", "replace-unk"])
def test_outlayers_generate_translates_every_sentence(tiny_bin, checkpoint, extra):
    _, ours = generate(tiny_bin, checkpoint, ["--batch-size", "5"] + extra, cli="outlayers-generate")
    assert sorted(ours) == list(range(24))
    if not extra:
        _, stock = generate(tiny_bin, checkpoint, ["--batch-size", "5"])
        assert len(stock) == 20  # fairseq-generate's own default drops the last batch (4 sentences)
        _, given = generate(tiny_bin, checkpoint, ["--batch-size", "5", "--required-batch-size-multiple", "8"],
                            cli="outlayers-generate")
        assert len(given) == 20  # an explicit value is the user's


def _validated(tiny_bin, checkpoint, cli, *extra):
    """(sentences, loss) of the valid split as fairseq-validate reports them."""
    cmd = [tool(cli), tiny_bin, "--path", checkpoint, "--cpu", "--batch-size", "5", "--num-workers", "0", *extra]
    if cli == "fairseq-validate":
        cmd += ["--user-dir", USER_DIR, "--task", "translation"]
    proc = run(cmd)
    found = re.findall(r"valid on 'valid' subset \| loss ([\d.]+) .*\| bsz (\d+)", proc.stdout + proc.stderr)
    assert len(found) == 1, (proc.stdout + proc.stderr)[-2000:]
    return int(found[0][1]), float(found[0][0])


def test_outlayers_validate_scores_every_sentence(tiny_bin, checkpoint):
    assert _validated(tiny_bin, checkpoint, "fairseq-validate")[0] == 20
    sentences, loss = _validated(tiny_bin, checkpoint, "outlayers-validate")
    assert sentences == 24
    assert loss == _validated(tiny_bin, checkpoint, "fairseq-validate", "--required-batch-size-multiple", "1")[1]


def _commands(text, shell=False):
    """The commands of a markdown file's code blocks (or of a shell script), continuation lines joined: a
    trailing backslash, or a bash array ``NAME=(`` up to its ``)``."""
    if not shell:
        text = "\n".join(m.group(1) for m in re.finditer(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M))
    text = re.sub(r"\\\n\s*", " ", text)
    commands, pending = [], None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if pending is not None:
            pending += " " + line
            if ")" in line:
                commands.append(pending)
                pending = None
        elif re.search(r"=\($", line) or (re.search(r"=\(", line) and ")" not in line):
            pending = line
        else:
            commands.append(line)
    return commands


def scoring_commands():
    """(file, command) of every documented command that translates or validates a set with fairseq's batching:
    fairseq-generate, fairseq-validate, and training with --eval-bleu."""
    found = []
    paths = [os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
    paths += sorted(glob.glob(os.path.join(REPO, "scripts", "*.sh")))
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for command in _commands(f.read(), shell=path.endswith(".sh")):
                if re.search(r"(^|[\s(\"'])fairseq-(generate|validate)\s", command) or "--eval-bleu " in command:
                    if not re.match(r"^(echo|printf|die|usage|local)\b", command):
                        found.append((os.path.relpath(path, REPO), command))
    return found


def test_every_documented_command_that_scores_passes_the_flag():
    found = scoring_commands()
    files = {path for path, _ in found}
    assert {"README.md", "docs/usage.md", "scripts/evaluate.sh"} <= files, files  # the scan sees the commands
    missing = [f"{path}: {command[:100]}" for path, command in found if FLAG not in command]
    assert not missing, "without --required-batch-size-multiple 1 (fairseq drops sentences):\n" + "\n".join(missing)
