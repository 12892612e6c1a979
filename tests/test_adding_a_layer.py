"""docs/architecture.md, "Adding a method", followed to the letter: the files it prints (two output layers, one of
them reading a file, each a method folder with its test and doc page) are written into a
temporary copy of the package, its tests and its docs, and nothing else there changes: the docs renderer finds
every generated block current, the new pages' export rows included. In that copy the new
methods' own tests pass (the maths against float64 references, training runs; the file-reading layer trained by
fairseq-train, decoded by fairseq-generate without its file, and a resume with another file refused in one line),
and so do the package's tests that read the registries (option ranges, the unused-option check, the options
listing, the leaves rule, the resume of every layer, the export table, the length of the docs pages) and the
sentence check of the docs. A resume with another value of each new option is refused. The copy is removed afterwards; this process never imports it."""
import json
import os
import re
import shutil
import sys

import pytest
from harness import REPO, run

DOC = os.path.join(REPO, "docs", "architecture.md")
#: the fenced blocks of the section whose first line names a file: "# PATH" (Python) or "<!-- PATH -->" (Markdown)
BLOCK = re.compile(r"```(?:python|markdown)\n(?:# |<!-- )([\w./-]+\.(?:py|md))(?: -->)?\n(.*?)```", re.S)
#: the package's tests that read the registries, by name
REGISTRY_TESTS = ["declares_its_range", "seam_options_parse", "bad_float", "criterion_options_parse",
                  "every_seam_and_method", "every_package_criterion", "are_leaves", "declared_once", "names_no_method",
                  "share_a_name", "criterion_equals_label_smoothed", "ratio_one_equals_full_softmax",
                  "pages_are_short", "serving_page_lists_every_seam"]
# not test_every_generated_block: the renderer's run in the copy finds every block current, so a second full check
# would repeat its work
#: the files the section prints
NEW_FILES = ["docs/scaled-cosine.md", "docs/unigram-prior.md",
             "fairseq_outlayers/methods/scaled_cosine/__init__.py",
             "fairseq_outlayers/methods/scaled_cosine/cosine_softmax.py",
             "fairseq_outlayers/methods/scaled_cosine/register.py",
             "fairseq_outlayers/methods/unigram_prior/__init__.py",
             "fairseq_outlayers/methods/unigram_prior/prior_softmax.py",
             "fairseq_outlayers/methods/unigram_prior/register.py",
             "tests/test_scaled_cosine.py", "tests/test_unigram_prior.py"]


#: in one Python of the copy (one start, not three): the docs renderer and the options listing as ``python -m``
#: runs them, then outlayers-train's entry point on each argv of a JSON list; prints {"docs": [exit code, stdout],
#: "options": [exit code, stdout], "train": [[exit code, stderr], ...]} as JSON on its last line
IN_THE_COPY = r"""
import contextlib, io, json, runpy, sys
from fairseq_outlayers.tools.wrappers import train

argvs = json.loads(sys.argv[1])


def called(function, argv, stream):
    sys.argv, text, code = argv, io.StringIO(), 0
    with stream(text):
        try:
            function()
        except SystemExit as e:  # what the interpreter does with it: a message goes to stderr, with status 1
            code = e.code
            if isinstance(code, str):
                sys.stderr.write(code + "\n")
                code = 1
    return [code or 0, text.getvalue()]


got = {"docs": called(lambda: runpy.run_module("fairseq_outlayers.lab.docs", run_name="__main__"),
                      ["docs"], contextlib.redirect_stdout),
       "options": called(lambda: runpy.run_module("fairseq_outlayers", run_name="__main__"),
                         ["fairseq_outlayers", "options"], contextlib.redirect_stdout),
       "train": [called(train, argv, contextlib.redirect_stderr) for argv in argvs]}
print(json.dumps(got))
"""


def section_files():
    """{path: text} of the files the section prints, each with its first line."""
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    start = text.index("\n## Adding a method")
    section = text[start:text.index("\n## ", start + 1)]
    files = {}
    for match in BLOCK.finditer(section):
        path, body = match.group(1), match.group(2)
        first = f"<!-- {path} -->" if path.endswith(".md") else f"# {path}"
        files[path] = first + "\n" + body
    return files


def copy_checkout(root):
    ignore = shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.pyc")
    for folder in ("fairseq_outlayers", "tests"):
        shutil.copytree(os.path.join(REPO, folder), os.path.join(root, folder), ignore=ignore)
    # what the blocks read: the records and pages, and the ledger's row files (a "decodes" block names rows)
    shutil.copytree(os.path.join(REPO, "docs"), os.path.join(root, "docs"), ignore=ignore)
    shutil.copytree(os.path.join(REPO, "configs", "ledger"), os.path.join(root, "configs", "ledger"), ignore=ignore)
    os.makedirs(os.path.join(root, "scripts"))
    shutil.copy(os.path.join(REPO, "README.md"), root)
    shutil.copy(os.path.join(REPO, "scripts", "check_sentences.py"), os.path.join(root, "scripts"))


@pytest.mark.long(60)
def test_the_files_of_the_doc_make_working_methods(tmp_path):
    files = section_files()
    assert sorted(files) == NEW_FILES
    root = str(tmp_path / "checkout")
    try:
        copy_checkout(root)
        for path, text in files.items():
            target = os.path.join(root, path)
            if os.path.exists(target):  # new files only, unless this checkout has added them as the doc says
                with open(target, encoding="utf-8") as f:
                    assert f.read() == text, f"{path} differs from docs/architecture.md"
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w", encoding="utf-8") as f:
                f.write(text)
        env = {"PYTHONPATH": root}
        cases = [
            (["--output-layer", "softmax", "--cosine-scale", "3"], "--cosine-scale needs --output-layer "
             "scaled-cosine; --output-layer softmax would ignore it"),
            (["--output-layer", "scaled-cosine", "--cosine-dim", "0"], "--cosine-dim must be a positive integer"),
            (["--output-layer", "scaled-cosine", "--cosine-scale", "1000"], "--cosine-scale must be in (0, 100]"),
            (["--output-layer", "unigram-prior", "--prior-counts", "absent.txt"],
             "--prior-counts absent.txt: no such file"),
            (["--output-layer", "softmax", "--prior-counts", "absent.txt"], "--prior-counts needs --output-layer "
             "unigram-prior")]
        argvs = [["outlayers-train", os.path.join(root, "no-data"), "--arch", "outlayers_transformer"] + extra
                 for extra, _ in cases]
        got = json.loads(run([sys.executable, "-c", IN_THE_COPY, json.dumps(argvs)], cwd=root, env=env)
                         .stdout.strip().splitlines()[-1])
        # the new pages hold their methods' export rows as the renderer writes them: it changes no file
        assert got["docs"][0] == 0 and got["docs"][1].splitlines() == [], got["docs"]
        with open(os.path.join(root, "docs", "scaled-cosine.md"), encoding="utf-8") as f:
            assert "| `--output-layer scaled-cosine` | no | its logits divide P h by its length" in f.read()
        # the registry-driven lists name the new methods and their options, with their defaults
        code, listing = got["options"]
        assert code == 0 and "--output-layer scaled-cosine: " in listing and "--output-layer unigram-prior: " in listing
        assert "--prior-counts FILE" in listing and "(default: the counts of the target dictionary)" in listing
        assert re.search(r"--cosine-scale S .*\[default: 10", listing) and "--cosine-dim K" in listing, listing
        # every option check through outlayers-train's entry point
        for (extra, message), (code, stderr) in zip(cases, got["train"]):
            assert code not in (0, None) and message in stderr and "Traceback" not in stderr, (extra, stderr)
        new_tests = [path for path in NEW_FILES if path.startswith("tests/")]
        run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"] + new_tests +
            ["tests/test_option_checks.py", "tests/test_options_listing.py", "tests/test_core.py",
             "tests/test_import_graph.py", "tests/test_fused_cross_entropy.py", "tests/test_sampled_softmax.py",
             "tests/test_resume_every_layer.py", "tests/test_docs_blocks.py", "tests/test_export.py", "-k",
             " or ".join(["scaled_cosine", "unigram_prior"] + REGISTRY_TESTS
                         + ["(a_resume_equals and (scaled or unigram))", "two_processes_equal_one_process",
                            "circle", "arrow"])],
            cwd=root, env=dict(env, OUTLAYERS_TEST_CASES="scaled unigram"), timeout=1200)
        run([sys.executable, os.path.join("scripts", "check_sentences.py")], cwd=root, env=env)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert not os.path.exists(root)
