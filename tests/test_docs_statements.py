"""What the documents' prose says about the code, the records and the benchmark pages, checked against them.

A figure of a page is rendered from its files (``lab.docs --check``); the sentences around the figures are
checked here, one kind of statement a test: which model ``make demo`` trains, which projection a command builds,
which route settled a verdict, what a p-value at the bootstrap's floor means, which seeds a difference is over,
which machines the records come from, what a GPU call holds, which torch a command line installs. A statement
that stops being true fails here, naming the page and what the files say instead.
"""
import argparse
import glob
import json
import os
import re

import pytest

from harness import REPO

README = os.path.join(REPO, "README.md")
RUNS = os.path.join(REPO, "docs", "results", "runs")
#: the user documents: the README, docs/*.md, the benchmark pages and the records' README (not the notebooks,
#: which keep what they said on their date)
USER_DOCS = ([README] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
             + sorted(glob.glob(os.path.join(REPO, "docs", "benchmarks", "*.md")))
             + [os.path.join(RUNS, "README.md"), os.path.join(REPO, "docs", "results", "ledger.md")])


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def _rel(path):
    return os.path.relpath(path, REPO)


def _prose(text):
    """The text without its generated blocks and fenced code."""
    text = re.sub(r"^<!-- generated: .*?^<!-- end generated -->$", "", text, flags=re.S | re.M)
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _records():
    out = []
    for path in sorted(glob.glob(os.path.join(RUNS, "*.json"))):
        with open(path, encoding="utf-8") as f:
            out.append(json.load(f))
    return out


# ----------------------------------------------------------------------------------------------------------
# architectures: the demo's model, the sizes a page names, the projection a command builds


def _demo_arch():
    text = _read(os.path.join(REPO, "configs", "demo-base.args"))
    return re.search(r"^--arch (\S+)", text, re.M).group(1)


def test_only_the_demo_model_calls_itself_the_demo_model():
    """An ``--arch`` docstring that names the demo is the architecture ``make demo`` trains
    (``configs/demo-base.args``), or it names that one as the demo's."""
    import fairseq_outlayers  # noqa: F401  (registers the architectures)
    from fairseq_outlayers.tools.options import arch_sections

    demo = _demo_arch()
    docs = dict(arch_sections())
    assert "demo" in docs[demo], f"{demo}'s docstring should say it is the `make demo` model"
    wrong = {arch: doc for arch, doc in docs.items()
             if re.search(r"\bdemo\b", doc) and arch != demo and f"`make demo` trains `{demo}`" not in doc}
    assert not wrong, f"these docstrings name the demo, which trains {demo}: {wrong}"


def test_a_page_gives_each_transformer_preset_its_own_size_word():
    """``outlayers_transformer_tiny`` is never called "small" in the same breath, nor ``_small`` "tiny": each is a
    preset's name."""
    found = []
    for path in USER_DOCS:
        for m in re.finditer(r"\b(small|tiny)\b[^.`|]{0,40}\(`outlayers_transformer_(tiny|small)`", _read(path)):
            if m.group(1) != m.group(2):
                found.append(f"{_rel(path)}: {m.group(0)}")
    assert not found, found


def test_a_projection_a_command_names_is_the_one_it_builds():
    """A comment "a learned A -> B projection" above a ``fairseq-train`` line: its ``--arch`` has decoder output
    size A and its ``--fixed-targets-dim`` is B (no projection is built when the two are equal)."""
    import fairseq_outlayers  # noqa: F401
    from fairseq.models import ARCH_CONFIG_REGISTRY

    checked = 0
    for path in USER_DOCS:
        lines = _read(path).splitlines()
        for i, line in enumerate(lines[:-1]):
            m = re.search(r"learned (\d+) -> (\d+) projection", line)
            if not m:
                continue
            near = " ".join(lines[max(0, i - 2):i + 2])  # a command below the comment, or a config named beside it
            if re.search(r"--arch (\S+)", lines[i + 1]):
                arch = re.search(r"--arch (\S+)", lines[i + 1]).group(1)
                dim = re.search(r"--fixed-targets-dim (\d+)", lines[i + 1]).group(1)
            else:
                config = re.search(r"`(configs/\S+\.yaml)`", near).group(1)
                arch = re.search(r"^model:\n  _name: (\S+)", _read(os.path.join(REPO, config)), re.M).group(1)
                dim = re.search(r"fixed_targets_dim=(\d+)", near).group(1)
            args = argparse.Namespace()
            ARCH_CONFIG_REGISTRY[arch](args)
            out = getattr(args, "decoder_output_dim", None) or args.decoder_embed_dim
            assert (str(out), dim) == m.groups(), f"{_rel(path)}: {arch} gives {out} -> {dim}, the page says " \
                                                  f"{m.group(1)} -> {m.group(2)}"
            assert out != int(dim), f"{_rel(path)}: {arch} has d = {out}: --fixed-targets-dim {dim} builds no projection"
            checked += 1
    assert checked


# ----------------------------------------------------------------------------------------------------------
# the ledger's figures: verdict routes, p at its floor, the seeds of a difference, ties, machines, digests


def test_a_bootstrap_p_at_its_floor_is_written_as_a_bound():
    """With N resamples the paired bootstrap's smallest p is 1 / (N + 1): the pages write it "≤ 0.001", never
    "p = 0.001" after an interval."""
    from fairseq_outlayers.lab.ledger.stats import N_SAMPLES, p_is, p_text

    floor = 1 / (N_SAMPLES + 1)
    assert p_text(floor) == "≤ 0.001" and p_is(floor) == "p ≤ 0.001"
    assert p_text(2 / (N_SAMPLES + 1)) == "0.002" and p_is(0.0123) == "p = 0.012"
    assert p_text(1 / 51, n_samples=50) == "≤ 0.020" and p_text(1.0) == "1.000"
    found = [f"{_rel(p)}: {m.group(0)}" for p in USER_DOCS for m in re.finditer(r"\], p = 0\.001\b", _read(p))]
    assert not found, found


def _evidence_rows():
    text = _read(README)
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 10 and cells[1].startswith("≥ ") and cells[5].startswith("["):
            rows.append(cells)
    return rows


def _num(text):
    return float(text.replace("−", "-").replace("+", ""))


def test_the_readme_names_the_route_that_settles_a_verdict_whose_seed_interval_crosses_the_target():
    """A verdict of the evidence table whose interval over seeds crosses the target is settled by the all-pairs
    route; the README's text above the table says that route exists."""
    rows = _evidence_rows()
    assert rows
    crossing = []
    for cells in rows:
        target = _num(cells[1][2:])
        low, high = (_num(x) for x in re.match(r"\[(\S+), (\S+)\]", cells[5]).groups())
        if not cells[2].startswith("inconclusive") and low < target < high:
            crossing.append(cells[0])
    prose = _prose(_read(README)).split("## What the evidence says", 1)[1]
    if crossing:
        assert "all-pairs" in prose and "crosses the target" in prose, (
            f"settled with the seed interval across the target: {crossing}; the README must name the all-pairs route")


def test_a_difference_over_fewer_seeds_than_its_means_says_so():
    """In a ``rows`` table, a mean over fewer seeds than the protocol's ("(seeds 1-2)") goes with a Δ that names
    the seeds it is over."""
    checked = 0
    for path in USER_DOCS:
        for line in _read(path).splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 7 and cells[0].startswith("`") and "[" in cells[4]:
                if "(seeds " in cells[1] or "(seeds " in cells[3]:
                    assert "over seeds" in cells[4], f"{_rel(path)}: {line}"
                    checked += 1
    assert checked


def test_tied_best_rows_are_all_named():
    """The "best system" line names every ``outlayers_transformer_tiny`` row whose mean equals the best one."""
    from fairseq_outlayers.lab.ledger.analysis import group, keep_seeds, mean_sd, seed_scores
    from fairseq_outlayers.lab.ledger.records import read_records

    rows = keep_seeds(group(read_records(RUNS))["multi30k-transformer-tiny"], [1, 2, 3])

    def arch(name):
        options = next(iter(rows[name].values()))["options"]
        return options[options.index("--arch") + 1]

    means = {n: mean_sd(seed_scores(rows, n, "test2016"))[0] for n in rows
             if arch(n) == "outlayers_transformer_tiny" and set(rows[n]) >= {1, 2, 3}}
    best = max(means.values())
    top = sorted(n for n, m in means.items() if round(m, 6) == round(best, 6))
    line = next(x for x in _read(README).splitlines() if x.startswith("| best system"))
    assert all(n in line for n in top), (top, line)


def test_the_ledger_counts_kinds_of_machine_apart_from_their_thread_settings():
    records = _records()
    kinds = {re.sub(r",? *OMP_NUM_THREADS=\S+", "", r.get("machine") or r["device"]) for r in records}
    text = _read(os.path.join(REPO, "docs", "results", "ledger.md"))
    assert f"on {len(kinds)} kind{'s' if len(kinds) > 1 else ''} of machine" in text


def test_the_records_readme_says_which_records_lack_their_digests():
    """The schema lets a record lack ``data_digest`` or ``file_digests`` (the oldest do); where one does, the
    records' README names the field as one some records lack."""
    from fairseq_outlayers.lab.ledger.schema import SCHEMA as RECORD

    text = " ".join(_read(os.path.join(RUNS, "README.md")).split())
    for field in ("data_digest", "file_digests"):
        if any(field not in r for r in _records()):
            assert RECORD[field][-1] is False, f"{field}: some records lack it, so the schema must not require it"
            assert f"`{field}`" in text and "lack" in text, f"docs/results/runs/README.md: some records lack {field}"


def test_a_step_row_on_retrained_models_is_marked():
    """A ``# from:`` row whose seed ran on retrained models (``after.parent_record_matches`` false) is marked on the
    ledger page, and the protocol page does not promise the row's own models."""
    retrained = {r["row"] for r in _records() if (r.get("after") or {}).get("parent_record_matches") is False}
    ledger = _read(os.path.join(REPO, "docs", "results", "ledger.md"))
    for row in retrained:
        line = next(x for x in ledger.splitlines() if x.startswith(f"| {row} |"))
        assert "retrained" in line, line
    reproducing = _read(os.path.join(REPO, "docs", "reproducing.md"))
    if retrained:
        assert "parent_record_matches" in reproducing and "before and after are the same model" not in reproducing


# ----------------------------------------------------------------------------------------------------------
# benchmark pages: the fastest fused loss, a page's load and checkout


def _peer_tables():
    text = _read(os.path.join(REPO, "docs", "benchmarks", "fused_loss_peers_cpu.md"))
    out = []
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()
                if line.startswith("| ") and "ms / step" not in line]
        rows = [r for r in rows if len(r) == 9]
        if rows:
            fastest = re.search(r"^Fastest exact `--fused-impl`: (.*)\.$", section, re.M).group(1)
            out.append((section.splitlines()[0], rows, fastest))
    return out


def test_the_fused_loss_page_says_what_the_peers_page_shows():
    """fused-loss.md: ``--fused-impl torch`` is the fastest exact ``--fused-impl`` of every table of the peers page,
    its memory range is the page's, and where another exact row is faster the page says it is not always the
    fastest row."""
    tables = _peer_tables()
    assert tables
    assert all(fastest.startswith("`--fused-impl torch`") for _, _, fastest in tables), tables
    memory = [float(r[5]) for _, rows, _ in tables for r in rows if r[1] == "`torch`"]
    prose = " ".join(_prose(_read(os.path.join(REPO, "docs", "fused-loss.md"))).split())
    assert f"{min(memory):.2f}-{max(memory):.2f} times the plain loss's memory" in prose
    beaten = [title for title, rows, _ in tables for column in (2, 3)
              if min((r for r in rows if r[8] == "yes"), key=lambda r: float(r[column].replace(",", "")))[1]
              != "`torch`"]
    assert ("not always the fastest exact row" in prose) == bool(beaten), beaten


def test_a_benchmark_line_keeps_a_modified_checkout_and_states_the_load(tmp_path):
    from fairseq_outlayers.lab import docs

    page = tmp_path / "p.md"
    page.write_text("# P\n\nCommand: `python x.py`\nDate: 2026-11-29 08:33 UTC; commit 17f5120 (fairseq_outlayers "
                    "modified); device AMD EPYC, 2 cores.\nLoad average (1, 5, 15 min) 0.7 1.7 1.8 at the start, 1.1 "
                    "1.1 1.4 at the end, on 2 cores.\n\n| a |\n|---|\n| 1 |\n")
    assert docs.benchmark_facts(str(page))["commit"] == "17f5120 (fairseq_outlayers modified)"
    assert docs.benchmark_load(str(page)) == "0.7 at the start, 1.1 at the end"
    page.write_text("# P\n\nCommand: `x`\nDate 2026-11-21; commit abcdef1; device cpu; 2 cores (shared with other "
                    "jobs).\n\n| a |\n")
    assert docs.benchmark_load(str(page)) == "other jobs (no load figure)"
    page.write_text("# P\n\nCommand: `x`\nDate 2026-11-21; commit abcdef1; device cpu.\n\n| a |\n")
    assert docs.benchmark_facts(str(page))["commit"] == "abcdef1" and docs.benchmark_load(str(page)) == "not stated"
    index = _read(os.path.join(REPO, "docs", "benchmarks", "README.md"))
    for name in ("serving_cpu.md", "fused_loss_cpu.md"):  # each page's commit as it states it, suffix and all
        facts = docs.benchmark_facts(os.path.join(REPO, "docs", "benchmarks", name))
        assert f"| [{name}]({name}) | {facts['date']} | {facts['commit']} |" in index, name
    assert not [p for p in USER_DOCS if re.search(r"idle machine", _read(p))]


# ----------------------------------------------------------------------------------------------------------
# the GPU pages: what one call holds, which torch, no hosting detail


def _gpu_run():
    text = _read(os.path.join(REPO, "scripts", "gpu_run.sh"))
    budget = int(re.search(r"^BUDGET=\$\{BUDGET:-(\d+)\}", text, re.M).group(1))
    steps = {m.group(1): int(m.group(2)) for m in re.finditer(r"^step (\S+) (\d+) \d+ --", text, re.M)}
    steps.update({m.group(1): int(m.group(2)) for m in re.finditer(r"\$\(limit (\S+) (\d+) \d+\)", text)})
    return budget, steps


def test_the_pages_say_what_one_gpu_call_holds():
    """A page that gives ``scripts/gpu_run.sh``'s budget gives the script's default, and where the steps' limits add
    up to more than it, says the steps take several calls (not "one run ... every speed table")."""
    budget, steps = _gpu_run()
    assert len(steps) >= 10
    for name in ("gpu.md", os.path.join("benchmarks", "README.md")):
        text = " ".join(_prose(_read(os.path.join(REPO, "docs", name))).split())
        for m in re.finditer(r"`BUDGET` \(default (\d+) s\)", text):
            assert int(m.group(1)) == budget, name
        if sum(steps.values()) > budget:
            assert "several calls" in text, f"docs/{name}: the steps' limits add up to {sum(steps.values())} s"
            assert not re.search(r"one (prepared )?run of about", text), name


def test_a_torch_a_page_installs_runs_every_fused_loss():
    """Every ``torch==X`` of a user page is a version whose ``F.linear_cross_entropy`` the fused loss uses
    (``--fused-impl torch`` refuses older ones with a line naming the version)."""
    source = next(iter(glob.glob(os.path.join(REPO, "fairseq_outlayers", "**", "linear_cross_entropy.py"),
                                 recursive=True)))
    need = tuple(int(x) for x in re.search(r"needs torch >= (\d+)\.(\d+)", _read(source)).groups())
    found = []
    for path in USER_DOCS:
        for m in re.finditer(r"torch==(\d+)\.(\d+)", _read(path)):
            if (int(m.group(1)), int(m.group(2))) < need:
                found.append(f"{_rel(path)}: {m.group(0)}")
    assert not found, f"older than torch {need[0]}.{need[1]}, which --fused-impl torch needs: {found}"


@pytest.mark.parametrize("phrase", ["device-minute", "session lent", "device machine"])
def test_user_pages_carry_no_hosting_detail_of_this_project(phrase):
    """How long a development session may hold a GPU here is not a user's fact."""
    found = [_rel(p) for p in USER_DOCS if phrase in _read(p).lower()]
    assert not found, (phrase, found)


# ----------------------------------------------------------------------------------------------------------
# the development page: coverage, exemptions


def test_the_coverage_settings_name_only_files_that_exist():
    for path in (os.path.join(REPO, ".coveragerc"), os.path.join(REPO, "docs", "development.md")):
        for name in re.findall(r"\btests/[\w/]+\.py\b", _read(path)):
            assert os.path.isfile(os.path.join(REPO, name)), f"{_rel(path)} names {name}, which is gone"


def test_the_development_page_names_each_layout_rules_exemptions():
    """A layout rule with exceptions says where they are listed: each non-empty exemption table of
    ``tests/test_core.py`` is named on docs/development.md."""
    core = _read(os.path.join(REPO, "tests", "test_core.py"))
    page = _read(os.path.join(REPO, "docs", "development.md"))
    tables = re.findall(r"^([A-Z_]+) = \{\s*\S", core, re.M)
    assert tables
    for name in tables:
        if name in ("OVER_THE_LIMIT", "NAMING_A_METHOD"):
            assert f"`{name}`" in page, f"docs/development.md: name {name}, the exceptions of its rule"


# ----------------------------------------------------------------------------------------------------------
# the prose figures' rule of lab.docs --check


def test_every_prose_figure_is_held_by_a_committed_page():
    """``lab.docs --check`` names a figure of a page's prose that no generated block of the page and no page it
    links to holds; the committed pages have none, and each page exempt from the rule exists and says why."""
    from fairseq_outlayers.lab import docs

    pages = docs.figure_pages()
    assert os.path.join(REPO, "docs", "speed.md") in pages and README in pages
    assert {_rel(p): docs.unheld_figures(p) for p in pages if docs.unheld_figures(p)} == {}
    for page, why in docs.FIGURES_EXEMPT.items():
        assert os.path.isfile(os.path.join(REPO, page)) and len(why.split()) >= 5, page


def test_the_figure_rule_finds_a_figure_no_page_holds(tmp_path):
    from fairseq_outlayers.lab import docs

    (tmp_path / "bench.md").write_text("| a |\n|---|\n| 0.98 |\n| 1,234.5 |\n")
    page = tmp_path / "page.md"
    page.write_text("# P\n\nIt took 19.6 s before the fix ([bench](bench.md)).\n"
                    "It runs at 0.98 times the softmax's speed and 1,234.5 tokens a second.\n\n"
                    "torch 2.6 changed the default; a ratio ≤ 1.5 is kept; `--lr 0.003` is an option.\n\n"
                    "The paper (Table 2) reports 33.17.\n\n"
                    "<!-- generated: rows x -->\n| 40.31 |\n<!-- end generated -->\n\nThe best is 40.31; 2.5 is new.\n")
    assert docs.unheld_figures(str(page)) == [(3, "19.6"), (14, "2.5")]


def test_the_serving_page_describes_its_models_from_their_checkpoints():
    """``scripts/bench_serving.py`` writes what each model is (architecture, epoch, updates, best validation loss,
    seed) from the checkpoint's own state, so the page's description needs no memory of how it was trained."""
    from argparse import Namespace

    from harness import load_script

    bench = load_script("bench_serving.py")
    state = {"cfg": {"model": Namespace(arch="outlayers_transformer_tiny"), "common": {"seed": 1}},
             "extra_state": {"train_iterator": {"epoch": 26}, "best": 3.9412},
             "optimizer_history": [{"num_updates": 3276}]}
    assert bench.trained_as(state) == ("outlayers_transformer_tiny, epoch 26, 3,276 updates, best validation loss "
                                       "3.94, seed 1")
    assert bench.trained_as({"args": Namespace(arch="transformer", seed=2), "optimizer_history": []}) == \
        "transformer, seed 2"
    assert bench.trained_as({}) == "no training state in the checkpoint"


def test_validation_bleu_skips_a_short_last_batch_and_the_test_does_not():
    """docs/reproducing.md: the ledger's validation BLEU (fairseq-train's own, with fairseq's batch multiple of 8)
    leaves out a last batch under 8 sentences, and its test translations cover every sentence. Both halves are read
    from the code the ledger runs: its protocol options and the scoring command."""
    from fairseq_outlayers.lab.ledger.rows import read_ledger_row, row_options
    from fairseq_outlayers.tools.evaluation import scoring

    page = _prose(_read(os.path.join(REPO, "docs", "reproducing.md")))
    assert "Validation BLEU skips the sentences of a last batch under 8" in page
    assert "the test translates every sentence" in page
    for path in sorted(glob.glob(os.path.join(REPO, "configs", "ledger", "*", "*.args"))):
        assert "--required-batch-size-multiple" not in row_options(read_ledger_row(path), 1, 5, 50, 5), path
    assert '"--required-batch-size-multiple", "1"' in _read(scoring.__file__)
