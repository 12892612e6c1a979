"""docs/architecture.md, "Adding an output layer", followed to the letter: its four files are written into a
temporary copy of the package, its tests and its docs, and nothing else there changes. In that copy the new
layer's own test passes (float64 logits, a training run that translates), and so do the package's tests that read
the registries (option ranges, the unused-option check, the options listing, the leaves rule) and the sentence
check of the docs. The copy is removed afterwards; this process never imports it."""
import glob
import os
import re
import shutil
import sys

from harness import REPO, run, tool

DOC = os.path.join(REPO, "docs", "architecture.md")
#: the fenced blocks of the section whose first line names a file: "# PATH" (Python) or "<!-- PATH -->" (Markdown)
BLOCK = re.compile(r"```(?:python|markdown)\n(?:# |<!-- )([\w./-]+\.(?:py|md))(?: -->)?\n(.*?)```", re.S)
#: the package's tests that read the registries, by name
REGISTRY_TESTS = ["declares_its_range", "seam_options_parse", "bad_float", "every_seam_and_method", "are_leaves",
                  "declared_once", "names_no_method", "share_a_name"]


def section_files():
    """{path: text} of the files the section prints, each with its first line."""
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    start = text.index("\n## Adding an output layer")
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
    os.makedirs(os.path.join(root, "docs"))
    os.makedirs(os.path.join(root, "scripts"))
    for path in glob.glob(os.path.join(REPO, "docs", "*.md")) + [os.path.join(REPO, "README.md")]:
        shutil.copy(path, os.path.join(root, os.path.relpath(path, REPO)))
    shutil.copy(os.path.join(REPO, "scripts", "check_sentences.py"), os.path.join(root, "scripts"))


def test_the_four_files_of_the_doc_make_a_working_layer(tmp_path):
    files = section_files()
    assert sorted(files) == ["docs/scaled-cosine.md", "fairseq_outlayers/models/scaled_cosine.py",
                             "fairseq_outlayers/modules/cosine_softmax.py", "tests/test_scaled_cosine.py"]
    root = str(tmp_path / "checkout")
    try:
        copy_checkout(root)
        for path, text in files.items():
            target = os.path.join(root, path)
            assert not os.path.exists(target), path  # new files only
            with open(target, "w", encoding="utf-8") as f:
                f.write(text)
        env = {"PYTHONPATH": root}
        run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "tests/test_scaled_cosine.py",
             "tests/test_option_checks.py", "tests/test_options_listing.py", "tests/test_core.py", "-k",
             " or ".join(["scaled_cosine"] + REGISTRY_TESTS)], cwd=root, env=env, timeout=900)
        run([sys.executable, os.path.join("scripts", "check_sentences.py")], cwd=root, env=env)
        # the registry-driven lists name the new layer and its options, with their defaults
        listing = run([sys.executable, "-m", "fairseq_outlayers", "options", "scaled-cosine"], cwd=root, env=env).stdout
        assert "--output-layer scaled-cosine: " in listing
        assert re.search(r"--cosine-scale S .*\[default: 10", listing) and "--cosine-dim K" in listing, listing
        for extra, message in (
                (["--output-layer", "softmax", "--cosine-scale", "3"], "--cosine-scale needs --output-layer "
                 "scaled-cosine; --output-layer softmax would ignore it"),
                (["--output-layer", "scaled-cosine", "--cosine-dim", "0"], "--cosine-dim must be a positive integer"),
                (["--output-layer", "scaled-cosine", "--cosine-scale", "1000"], "--cosine-scale must be in (0, 100]")):
            proc = run([tool("outlayers-train"), os.path.join(root, "no-data"), "--arch", "outlayers_transformer"]
                       + extra, cwd=root, env=env, check=False)
            assert proc.returncode != 0 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert not os.path.exists(root)
