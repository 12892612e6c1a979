"""Figures generated, not typed: every generated block of README.md and docs/ is what its committed files give
(``python -m fairseq_outlayers.lab.docs --check``), a changed figure or a stale block is found, benchmark pages
carry command, date, commit and device, and the method pages stay short."""
import glob
import os
import re
import shutil

import pytest

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.lab import docs
from harness import REPO

METHOD_PAGES = ["joint-output.md", "shared-private.md", "fixed-targets.md", "continuous-outputs.md", "fused-loss.md"]
# the pages every user reads through, whatever methods the package holds
GUIDES = ["architecture.md", "development.md", "gpu.md", "install.md", "recipes.md", "reproducing.md", "results.md",
          "troubleshooting.md", "usage.md"]


def test_every_generated_block_is_what_its_files_give():
    """The claims and their verdicts, the rows, the options tables and the benchmark tables of the committed
    documents equal what the committed records, claims file, registries and benchmark pages give today."""
    found = docs.stale(docs.documents(REPO))
    assert not found, ("stale generated blocks (run python -m fairseq_outlayers.lab.docs):\n"
                       + "\n".join(f"{p}: {spec}" for p, spec in found))


def test_the_documents_have_the_blocks_the_issue_asks_for():
    texts = {name: open(os.path.join(REPO, "docs", name), encoding="utf-8").read() for name in METHOD_PAGES}
    for name, text in texts.items():
        assert "<!-- generated: options " in text, name
        assert "```bibtex" in text, name
    for name in METHOD_PAGES[:4]:
        assert f"<!-- generated: claims {name} -->" in texts[name] and "<!-- generated: rows " in texts[name], name
    readme = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    assert "<!-- generated: readme-evidence -->" in readme
    results = open(os.path.join(REPO, "docs", "results.md"), encoding="utf-8").read()
    for kind in ("claims", "rule", "further-seeds"):
        assert f"<!-- generated: {kind} -->" in results
    # every claim of the claims file shows on its page
    for claim in docs.Context(REPO).claims:
        if claim["page"] != "results.md":
            assert f"<!-- generated: claims {claim['page']} -->" in texts[claim["page"]], claim["name"]


def test_the_pages_are_short():
    """The guides together under 1,900 lines; every other top-level page is a method's page, under 200 lines
    each. A method added as docs/architecture.md says brings its own page, and no budget of the guides stops it."""
    lengths = {os.path.basename(p): len(open(p, encoding="utf-8").read().splitlines())
               for p in glob.glob(os.path.join(REPO, "docs", "*.md"))}
    assert set(METHOD_PAGES) <= set(lengths) and set(GUIDES) <= set(lengths), sorted(lengths)
    assert {n: k for n, k in lengths.items() if n not in GUIDES and k > 200} == {}
    # architecture.md holds the two worked examples of "Adding a method" (about 200 lines of files to copy)
    assert sum(lengths[n] for n in GUIDES) < 1900, {n: lengths[n] for n in GUIDES}
    assert lengths["architecture.md"] <= 400


@pytest.fixture
def tree(tmp_path):
    """A copy of the files the blocks read: docs/benchmarks and docs/results (claims, records)."""
    for sub in ("benchmarks", "results"):
        shutil.copytree(os.path.join(REPO, "docs", sub), tmp_path / "docs" / sub)
    return tmp_path


def test_a_changed_figure_is_found_and_rewritten(tree):
    page = tree / "docs" / "page.md"
    page.write_text("# A page\n\n<!-- generated: bench fused_loss_cpu.md 1 -->\n<!-- end generated -->\n\n"
                    "<!-- generated: options fixed -->\nold\n<!-- end generated -->\n")
    ctx = docs.Context(str(tree))
    assert [spec for _, spec in docs.stale([str(page)], ctx)] == ["bench fused_loss_cpu.md 1"]
    docs.stale([str(page)], ctx, write=True)
    assert docs.stale([str(page)], ctx) == []
    text = page.read_text()
    table = open(os.path.join(REPO, "docs", "benchmarks", "fused_loss_cpu.md"), encoding="utf-8").read()
    assert "| softmax | fp32 | torch |" in text and text.count("| softmax | fp32 | torch |") == 1
    assert re.search(r"\(\d{4}-\d\d-\d\d, commit [0-9a-f]{7}, device ", text)
    assert "| `--fixed-targets-seed N` | `1` |" in text
    # one figure typed over: found, with the block named
    page.write_text(text.replace("1.13x", "1.31x"))
    assert "1.13x" in table and [spec for _, spec in docs.stale([str(page)], ctx)] == ["bench fused_loss_cpu.md 1"]


def test_a_benchmark_page_without_its_commit_or_date_is_refused(tree):
    bench = tree / "docs" / "benchmarks" / "fixed_targets.md"
    text = bench.read_text()
    bench.write_text(re.sub(r"commit [0-9a-f]{7}", "", text))
    with pytest.raises(OutlayersConfigError, match=r"fixed_targets.md: its header gives no commit; .*git log"):
        docs.render_text("<!-- generated: benchmarks -->\n<!-- end generated -->\n", docs.Context(str(tree)))
    bench.write_text(re.sub(r"20\d\d-\d\d-\d\d", "", text))
    with pytest.raises(OutlayersConfigError, match="gives no date"):
        docs.benchmark_facts(str(bench))
    # every committed page has the four facts
    for path in glob.glob(os.path.join(REPO, "docs", "benchmarks", "*.md")):
        if not path.endswith("README.md"):
            assert set(docs.benchmark_facts(path)) == {"command", "date", "commit", "device"}, path


@pytest.mark.parametrize("text,message", [
    ("<!-- generated: plots -->\n<!-- end generated -->\n", "unknown generated block 'plots'"),
    ("<!-- generated: options fixed -->\nno end\n", "has no '<!-- end generated -->'"),
    ("<!-- generated: rows no-such-row -->\n<!-- end generated -->\n", "no record of row 'no-such-row'"),
    ("<!-- generated: options nothing-matches -->\n<!-- end generated -->\n", "no section of outlayers-options"),
])
def test_a_bad_block_is_one_line(text, message):
    with pytest.raises(OutlayersConfigError) as e:
        docs.render_text(text, docs.Context(REPO), "page.md")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_the_command_line(tree, capsys):
    page = tree / "docs" / "page.md"
    page.write_text("<!-- generated: options fixed -->\nold\n<!-- end generated -->\n")
    assert docs.main(["--check", str(page)]) == 1
    assert "block 'options fixed' differs from its files" in capsys.readouterr().out
    assert docs.main([str(page)]) == 0 and docs.main(["--check", str(page)]) == 0


def test_the_decodes_block_gives_each_seeds_scales_and_both_decodes(tree):
    """``decodes``: one line a recorded seed, read from its record (a second seed of word-vmf-teacher written here
    with known figures); a row with a row file and no record says "not run"; the range of beam 5 minus greedy ends
    the block; a row tested without a scale chosen on validation, or a name that is no row, is refused."""
    import json

    shutil.copytree(os.path.join(REPO, "configs", "ledger"), tree / "configs" / "ledger")
    runs = tree / "docs" / "results" / "runs"
    record = json.loads((runs / "word-vmf-teacher.seed1.json").read_text())
    record.update(seed=2, epochs=30, best_epoch=25, training_seconds=1234.4, resumed=True,
                  decodes={"test2016": {"1": 35.125}})
    record["validation"]["best"] = 36.5
    record["decoding"].update(scale=None, scale_validation={"none": 35.0, "5": 34.0, "10": 33.0, "20": 32.0,
                                                               "40": 31.0})
    record["test"]["test2016"]["sacrebleu"] = 35.5
    record["teacher"]["seconds"] = 4000.0
    (runs / "word-vmf-teacher.seed2.json").write_text(json.dumps(record))
    record.update(seed=3, resumed=False)
    record["teacher"]["seconds"] = 0.1  # a teacher an earlier student of the seed trained
    (runs / "word-vmf-teacher.seed3.json").write_text(json.dumps(record))
    for old in runs.glob("word-vmf-teacher-mixed.seed*"):  # a row file without records
        old.unlink()
    text = docs.render_text("<!-- generated: decodes word-vmf-teacher word-vmf-teacher-mixed -->\n"
                            "<!-- end generated -->\n", docs.Context(str(tree)))
    lines = text.splitlines()
    assert "per scale (none / 5 / 10 / 20 / 40)" in lines[1] and "test2016, beam 5" in lines[1]
    assert lines[4] == ("| `word-vmf-teacher`, 2 | 36.50 | 35.00 / 34.00 / 33.00 / 32.00 / 31.00 | none | 35.50 "
                        "| 35.12 | 30 (25) | 1,234, resumed; teacher 4,000 |")
    assert lines[5].endswith("| 30 (25) | 1,234; teacher reused |")
    assert lines[6] == "| `word-vmf-teacher-mixed` | not run | — | — | — | — | — | — |"
    # seed 1's record: 37.46 at beam 5, 36.47 greedy; seeds 2-3 above: 35.50 and 35.12
    assert lines[7:9] == ["", "On test2016, beam 5 minus greedy: +0.38 to +0.99 BLEU over these 3 seeds."]
    for spec, message in (("decodes word-softmax", "word-softmax seed 1 chose no score scale on validation"),
                          ("decodes no-such-row", "'no-such-row' has neither a record")):
        with pytest.raises(OutlayersConfigError, match=message):
            docs.render_text(f"<!-- generated: {spec} -->\n<!-- end generated -->\n", docs.Context(str(tree)))
    # a rows block names the one seed of a row that has one (later seeds of the real row removed here)
    for later in runs.glob("word-max-margin-beam5.seed[2-9].*"):
        later.unlink()
    rows = docs.render_text("<!-- generated: rows word-max-margin-beam5 -->\n<!-- end generated -->\n",
                            docs.Context(str(tree)))
    assert re.search(r"\| `word-max-margin-beam5` \| \d+\.\d\d \(seed 1\) \|", rows), rows
    one = docs.render_text("<!-- generated: decodes word-max-margin-beam5 -->\n<!-- end generated -->\n",
                           docs.Context(str(tree))).splitlines()
    assert one[-2] == "On test2016, beam 5 minus greedy: +0.44 to +0.44 BLEU over this seed.", one
