"""The generated blocks of the user documents: every figure from an experiment or a benchmark, and every options
table, is rendered from committed files between two marker comments, never typed.

    python -m fairseq_outlayers.lab.docs            # rewrite every block of README.md and docs/**.md in place
    python -m fairseq_outlayers.lab.docs --check    # exit 1, naming the file and block, where one differs,
                                                    # and each prose figure that no committed page holds

A block is ``<!-- generated: KIND ARGS -->``, the rendered text, then ``<!-- end generated -->``; one inside a
fenced code block is an example of a page (docs/architecture.md prints a method's page) and is left as it is. Kinds:

- ``claims [PAGE]``: the claims of ``docs/results/claims.json`` (those whose page is PAGE) with the verdict the
  ledger's rule gives over the protocol's seeds (``ledger.render.claims_table``);
- ``rule``: the verdict rule, as ``stats.target_verdict`` applies it;
- ``further-seeds [PAGE]``: the verdicts over every seed both rows have, or "waiting for seeds" (the claims whose
  page is PAGE);
- ``readme-evidence``: the README's evidence table (one line a claim: verdict, difference, parameters, page);
- ``rows ROW[:OTHER] ...``: each row's test2016 mean over the protocol's seeds and its difference from its
  baseline (or from OTHER), from the records of ``docs/results/runs``;
- ``decodes ROW ...``: every recorded seed of rows whose score scale was chosen on validation: greedy and
  per-scale validation figures, the scale chosen, test at that beam and greedy, epochs and seconds (a row with a
  row file but no record: "not run"), and the range of test at the beam minus greedy;
- ``seed-scores ROW BASELINE``: every recorded seed of the two rows side by side, the difference over the seeds
  both have and, where a claim sets the two against each other, its verdict over every seed both have;
- ``options WORD ...``: the options of the package's output layers, embedding methods and criterions whose
  section a WORD picks (``outlayers-options``, read from the registries); the word ``seams`` gives the
  options of the two seams themselves;
- ``archs``: every ``--arch`` of the package with its description;
- ``exports FOLDER...``: the output layers and embeddings of those method folders with how they export (``export=``
  of each registration); docs/serving.md names the package's, a method's own page its own;
- ``methods``: the README's table of methods, from each registration's ``ABOUT`` (summary, paper, page)
- ``cli COMMAND``: the options of a console command's argparse parser (the commands of
  ``option_blocks.CLI_PARSERS``, a fixed table: a document names what is rendered, it runs nothing it names);
- ``bench FILE [N ...]``: the tables of a benchmark page (the N-th ones), verbatim, with its date and commit;
- ``benchmarks``: each page of ``docs/benchmarks/`` with its command, date, commit (and "modified" where the page
  says its checkout was), device and the machine's load as the page states it. A page without one of the first
  four is refused; one that states no load reads "not stated".

A figure in the prose around the blocks (README.md, docs/*.md, the READMEs of docs/benchmarks and
docs/results/runs) must be one a committed page holds: a generated block of the same page, or a page it links to
(``unheld_figures``; ``FIGURES_EXEMPT`` names the pages exempt from it and why). ``--check`` names each other one.

The blocks read from the ledger are ``ledger_blocks``'s, those read from the code ``option_blocks``'s; this module
holds the benchmark blocks and renders, checks and writes the documents. The test suite runs ``--check``
(tests/test_docs_blocks.py), so a block that is not what its files give fails.
"""
import argparse
import glob
import os
import re
import sys
from typing import Dict, List, Optional, Tuple

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.textfiles import read_text
from fairseq_outlayers.lab.ledger_blocks import (CLAIMS, LEDGER, TEST, _claims_block, _further_block,  # noqa: F401
                                                 _decodes_block, _readme_block, _rows_block, _rule_block,
                                                 _seed_scores_block)
from fairseq_outlayers.lab.option_blocks import (_archs_block, _cell, _cli_block, _exports_block,  # noqa: F401
                                                 _methods_block, _options_block, _seam_row)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCHMARKS = "docs/benchmarks"
BLOCK = re.compile(r"^<!-- generated: (?P<spec>[^>]*?) -->\n(?P<body>.*?)^<!-- end generated -->$", re.M | re.S)
_OPEN = re.compile(r"<!-- generated: ")


def documents(root: str = ROOT) -> List[str]:
    """README.md and every Markdown file under docs/ (notes and benchmark pages included)."""
    out = [os.path.join(root, "README.md")]
    out += sorted(glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True))
    return [p for p in out if os.path.isfile(p)]


class Context:
    """What the blocks are rendered from (paths relative to ``root``), read once and shared by every block."""

    def __init__(self, root: str = ROOT):
        self.root = root
        self.cache: Dict = {}
        self._tables = None
        self._claims = None
        #: the document being rendered (relative to ``root``), for links relative to it; None: a page of docs/
        self.document: Optional[str] = None

    def path(self, rel: str) -> str:
        return os.path.join(self.root, rel)

    @property
    def tables(self):
        if self._tables is None:
            from fairseq_outlayers.lab.ledger import records as rec
            from fairseq_outlayers.lab.ledger.analysis import group

            self._tables = group(rec.read_records(self.path(LEDGER)))
        return self._tables

    @property
    def claims(self) -> List[Dict]:
        if self._claims is None:
            from fairseq_outlayers.lab.ledger.render import read_claims

            self._claims = read_claims(self.path(CLAIMS))
        return self._claims


#: what a benchmark page's header must give: (name, pattern)
BENCH_FACTS = (("command", re.compile(r"^Command: `(?P<v>[^`]+)`", re.M)),
               ("date", re.compile(r"\b(?P<v>20\d\d-\d\d-\d\d)\b")),
               # a page made from a modified checkout says so after the hash ("(fairseq_outlayers modified)"),
               # and the rendered line keeps it
               ("commit", re.compile(r"\bcommit:? `?(?P<v>[0-9a-f]{7,40}\b(?: \([^()]*\bmodified\))?)")),
               ("device", re.compile(r"\b[Dd]evice:? `?(?P<v>[A-Za-z0-9][^;,.`(\n]*)")))


def benchmark_facts(path: str) -> Dict[str, str]:
    """The command, date, commit and device a benchmark page's header (before its first table) gives; a page
    missing one is refused with a line naming the page and the fact."""
    with open(path, encoding="utf-8") as f:
        head = f.read().split("\n|", 1)[0]
    facts = {}
    for name, pattern in BENCH_FACTS:
        m = pattern.search(head if name == "command" else BENCH_FACTS[0][1].sub("", head))
        if m is None:
            raise OutlayersConfigError(f"{os.path.relpath(path, ROOT)}: its header gives no {name}; a benchmark page "
                                       "states the command, date, commit and device it was made with (take a "
                                       "missing date or commit from `git log` of the page)")
        facts[name] = m.group("v").strip()
    return facts


_SHARED = re.compile(r"other (?:jobs|processes)|shared with", re.I)


def benchmark_load(path: str) -> str:
    """How loaded the machine was, as a benchmark page's header states it: the 1-minute load average at the start
    and the end ("0.7 -> 1.1"), "other jobs" where the page says others shared the machine, or "not stated"."""
    with open(path, encoding="utf-8") as f:
        head = f.read().split("\n|", 1)[0]
    shared = bool(_SHARED.search(head))
    m = re.search(r"[Ll]oad average", head)
    said = ""
    if m:
        seg = re.split(r"\.\s|\.$|\(other|:? other|;", head[m.end():m.end() + 200].replace("\n", " "))[0]
        triples = "1, 5, 15" in seg
        seg = re.sub(r"\([^)]*\)", "", seg)
        nums = re.findall(r"\d+(?:\.\d+)?", seg)
        stride = 3 if triples or len(nums) in (3, 6) else 1
        if nums:
            said = f"{nums[0]} at the start" + (f", {nums[stride]} at the end" if len(nums) > stride else "")
    if shared:
        return f"{said}; other jobs" if said else "other jobs (no load figure)"
    return said or "not stated"


def _benchmarks_block(ctx: Context, args: List[str]) -> List[str]:
    lines = ["| page | date | commit | device | machine load (1-min average), as the page states |",
             "| --- | --- | --- | --- | --- |"]
    for path in sorted(glob.glob(ctx.path(os.path.join(BENCHMARKS, "*.md")))):
        if os.path.basename(path) == "README.md":
            continue
        f = benchmark_facts(path)
        name = os.path.basename(path)
        lines.append(f"| [{name}]({name}) | {f['date']} | {f['commit']} | {_cell(f['device'])} | "
                     f"{_cell(benchmark_load(path))} |")
    return lines


def _bench_block(ctx: Context, args: List[str]) -> List[str]:
    """The tables of a benchmark page, verbatim: ``bench FILE`` (every table) or ``bench FILE N...`` (the N-th
    tables, from 1), under a line naming the page, its date, commit and device."""
    if not args:
        raise OutlayersConfigError("a bench block names a page of docs/benchmarks/ (e.g. fused_loss_cpu.md)")
    path = ctx.path(os.path.join(BENCHMARKS, args[0]))
    if os.path.basename(args[0]) != args[0] or not args[0].endswith(".md") or not os.path.isfile(path):
        raise OutlayersConfigError(f"bench block: {BENCHMARKS}/{args[0]} does not exist")
    facts = benchmark_facts(path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    tables = [m.group(0).rstrip("\n").split("\n") for m in re.finditer(r"(?:^\|.*\n?)+", text, re.M)]
    numbers = args[1:] or [str(n) for n in range(1, len(tables) + 1)]
    if not tables or not all(n.isdigit() and n.isascii() and 1 <= int(n) <= len(tables) for n in numbers):
        raise OutlayersConfigError(f"bench block: {args[0]} has {len(tables)} tables; give their numbers from 1 to "
                                   f"{len(tables)}, not {' '.join(args[1:])}")
    chosen = [tables[int(n) - 1] for n in numbers]
    here = os.path.dirname(ctx.document) if ctx.document else "docs"
    link = os.path.relpath(os.path.join(BENCHMARKS, args[0]), here).replace(os.sep, "/")
    lines = [f"From [{args[0]}]({link}) ({facts['date']}, commit {facts['commit']}, device "
             f"{facts['device']}).", ""]
    for table in chosen:
        lines += table + [""]
    return lines[:-1]


KINDS = {"claims": _claims_block, "rule": _rule_block, "further-seeds": _further_block,
         "readme-evidence": _readme_block, "rows": _rows_block, "seed-scores": _seed_scores_block,
         "decodes": _decodes_block,
         "options": _options_block, "cli": _cli_block,
         "archs": _archs_block, "exports": _exports_block, "methods": _methods_block, "bench": _bench_block, "benchmarks": _benchmarks_block}


def render_text(text: str, ctx: Context, where: str = "text") -> str:
    """``text`` with every block rendered again; an unknown kind, or a marker without its end, is an error."""
    if len(_OPEN.findall(text)) != len(BLOCK.findall(text)):
        raise OutlayersConfigError(f"{where}: a '<!-- generated: ... -->' marker has no '<!-- end generated -->' "
                                   "line after it")

    fences = [f.span() for f in re.finditer(r"^```.*?^```", text, re.M | re.S)]

    def one(m):
        if any(start <= m.start() < end for start, end in fences):  # a page printed as an example (a code block)
            return m.group(0)
        spec = m.group("spec").split()
        if not spec or spec[0] not in KINDS:
            raise OutlayersConfigError(f"{where}: unknown generated block '{m.group('spec')}'; kinds: "
                                       f"{', '.join(KINDS)}")
        try:
            body = KINDS[spec[0]](ctx, spec[1:])
        except OutlayersConfigError as e:
            raise OutlayersConfigError(f"{where}: block '{m.group('spec')}': {e}") from None
        except (Exception, SystemExit) as e:  # a block that cannot be rendered fails the check, in one line
            text = " ".join(str(e).split()) or "no message"
            raise OutlayersConfigError(f"{where}: block '{m.group('spec')}' cannot be rendered "
                                       f"({type(e).__name__}: {text})") from None
        return f"<!-- generated: {m.group('spec')} -->\n" + "\n".join(body) + "\n<!-- end generated -->"

    return BLOCK.sub(one, text)


#: a figure: a decimal number (thousands with commas), not part of a dotted version such as 0.12.3.1
FIGURE = re.compile(r"(?<![\w.])\d+(?:,\d{3})*\.\d+(?!\d|\.\d)")
_LINKED = re.compile(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)")
#: not a measured figure: a bound or setting ("ratio ≤ 1.5"), or a version where the paragraph names the software
_BOUND = re.compile(r"(?:>=|<=|==|[<>≤≥=])\s*$")
_SOFTWARE = re.compile(r"\b(?:[Pp]ython|torch|fairseq|CUDA|sacreBLEU|CTranslate2|NumPy|gensim)\b")
_CITES = re.compile(r"et al\.|\bpaper\b|\bTable \d|\bFigure \d")
#: the prose figures' rule (``unheld_figures``) covers README.md, docs/*.md and the two READMEs of docs/; these pages
#: are exempt from it, each with the reason
FIGURES_EXEMPT = {
    "docs/recipes.md": "the recipes' own settings and data statistics (their scripts set and print them)",
}


def figure_pages(root: str = ROOT) -> List[str]:
    """The pages whose prose figures must be held by a committed page: README.md, docs/*.md, docs/benchmarks/
    README.md and docs/results/runs/README.md (the benchmark pages and notebooks are where figures are held)."""
    out = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    out += [os.path.join(root, "docs", "benchmarks", "README.md"), os.path.join(root, "docs", "results", "runs",
                                                                                 "README.md")]
    return [p for p in out if os.path.isfile(p) and os.path.relpath(p, root) not in FIGURES_EXEMPT]


def unheld_figures(path: str) -> List[Tuple[int, str]]:
    """(line, figure) of every figure in a page's prose that neither a generated block of the page nor a committed
    page it links to holds. Prose: not a block, fenced code, a code span or an HTML comment. Not a measured figure,
    so not checked: a bound or setting after a comparison sign, a version (X.Y) in a paragraph that names the
    software, a line that cites a paper."""
    text = read_document(path)
    held = {f.replace(",", "") for m in BLOCK.finditer(text) for f in FIGURE.findall(m.group("body"))}
    for link in _LINKED.findall(text):
        linked = os.path.normpath(os.path.join(os.path.dirname(path), link))
        if os.path.isfile(linked):
            held.update(f.replace(",", "") for f in FIGURE.findall(read_document(linked)))

    def blank(m):
        return "\n" * m.group(0).count("\n")

    prose = re.sub(r"<!--.*?-->", blank, re.sub(r"^```.*?^```", blank, BLOCK.sub(blank, text), flags=re.S | re.M),
                   flags=re.S)
    out, paragraph = [], []
    lines = prose.splitlines()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            paragraph = []
            continue
        if not paragraph:  # the paragraph this line starts, for its software names
            end = next((i for i in range(n - 1, len(lines)) if not lines[i].strip()), len(lines))
            paragraph = lines[n - 1:end]
        if _CITES.search(line):
            continue
        line = re.sub(r"`[^`]*`", "``", line)
        software = any(_SOFTWARE.search(x) for x in paragraph)
        for m in FIGURE.finditer(line):
            figure = m.group(0).replace(",", "")
            if (figure in held or _BOUND.search(line[:m.start()])
                    or (software and re.fullmatch(r"\d\.\d{1,2}", figure))):
                continue
            out.append((n, m.group(0)))
    return out


def read_document(path: str) -> str:
    """The text of a Markdown file; a missing or unreadable file, a directory or a file that is not UTF-8 is one
    line naming it."""
    return read_text(path, "the documents are UTF-8: convert it (iconv -f latin1 -t utf-8)",
                     unreadable="give a Markdown file")


def stale(paths: List[str], ctx: Optional[Context] = None, write: bool = False) -> List[Tuple[str, str]]:
    """(file, first differing block) of every file whose blocks differ from what their files give; with
    ``write``, those files are rewritten."""
    ctx = ctx or Context()
    out = []
    for path in paths:
        text = read_document(path)
        if "<!-- generated: " not in text:
            continue
        ctx.document = os.path.relpath(path, ctx.root)
        new = render_text(text, ctx, ctx.document)
        if new != text:
            old_blocks, new_blocks = BLOCK.findall(text), BLOCK.findall(new)
            first = next((a[0] for a, b in zip(old_blocks, new_blocks) if a != b), "?")
            out.append((os.path.relpath(path, ctx.root), first))
            if write:
                from fairseq_outlayers.outfiles import write_text

                write_text(path, new)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fairseq_outlayers.lab.docs",
                                     description=__doc__.strip().splitlines()[0])
    parser.add_argument("files", nargs="*", help="Markdown files (default: README.md and docs/**.md)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 naming each stale block")
    args = parser.parse_args(argv)
    try:
        found = stale([os.path.abspath(f) for f in args.files] or documents(), write=not args.check)
    except OutlayersConfigError as e:
        print(f"docs: error: {e}", file=sys.stderr)
        return 2
    for path, spec in found:
        print(f"{path}: block '{spec}' {'differs from its files' if args.check else 'rewritten'}")
    figures = []
    if args.check and not args.files:
        figures = [(p, n, f) for p in figure_pages() for n, f in unheld_figures(p)]
    for path, line, figure in figures:
        print(f"{os.path.relpath(path, ROOT)}:{line}: figure {figure} is held by no generated block of the page and "
              "no committed page it links to: render it, link the page that holds it, or remove it")
    return 1 if args.check and (found or figures) else 0


if __name__ == "__main__":
    sys.exit(main())
