"""The ledger's plots, drawn as plain SVG from the records alone (no plotting library; the same records give the same
bytes, like the tables):

* ``curves_svg(rows)``: the validation score of every epoch of every recorded run (a colour per row, a dash
  pattern per seed; the circle marks the epoch whose checkpoint was tested);
* ``scores_svg(rows)``: test sacreBLEU against trained parameters (a small dot per seed, a ring on the mean of the
  recorded seeds, the row's name beside it).

``rows`` is ``{row: {seed: record}}``, one table of ``analysis.group``.
"""
import math
from html import escape
from typing import Dict, List, Optional, Sequence, Tuple

WIDTH, HEIGHT = 720, 420
LEFT, RIGHT, TOP, BOTTOM = 64, 190, 36, 52
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")
DASHES = ("", "6 3", "2 3", "8 3 2 3")
#: the first line of every plot drawn here
SVG_HEADER = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
              f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">')


def is_rendered_svg(text: str) -> bool:
    """``text`` (the start of a file) is a plot drawn here: its first two lines are this module's."""
    return text.startswith(SVG_HEADER + "\n" + f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>')


def nice_ticks(low: float, high: float, count: int = 6) -> List[float]:
    """Round tick values (1, 2 or 5 times a power of ten apart) covering [low, high]."""
    if high <= low:
        low, high = low - 1, high + 1
    raw = (high - low) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(low / step + 1e-9) * step
    ticks, t = [], first
    while t < high + step * 0.999:
        ticks.append(round(t, 10))
        t += step
    return ticks


def _num(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _label(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 or value == int(value) else f"{value:g}"


class Chart:
    """Axes from the data's range, SVG elements in data coordinates."""

    def __init__(self, title: str, xlabel: str, ylabel: str, xs: Sequence[float], ys: Sequence[float]):
        self.xt, self.yt = nice_ticks(min(xs), max(xs)), nice_ticks(min(ys), max(ys))
        self.parts = [SVG_HEADER, f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
                      f'<text x="{LEFT}" y="20" font-size="14">{escape(title)}</text>']
        x0, x1, y0, y1 = LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP
        for t in self.xt:
            x = self.x(t)
            self.parts.append(f'<line x1="{_num(x)}" y1="{y0}" x2="{_num(x)}" y2="{y1}" stroke="#e5e5e5"/>')
            self.parts.append(f'<text x="{_num(x)}" y="{y0 + 16}" text-anchor="middle">{_label(t)}</text>')
        for t in self.yt:
            y = self.y(t)
            self.parts.append(f'<line x1="{x0}" y1="{_num(y)}" x2="{x1}" y2="{_num(y)}" stroke="#e5e5e5"/>')
            self.parts.append(f'<text x="{x0 - 6}" y="{_num(y + 4)}" text-anchor="end">{_label(t)}</text>')
        self.parts.append(f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="none" stroke="#333"/>')
        self.parts.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{HEIGHT - 12}" text-anchor="middle">'
                          f'{escape(xlabel)}</text>')
        self.parts.append(f'<text transform="translate(16 {(y0 + y1) / 2:.1f}) rotate(-90)" text-anchor="middle">'
                          f'{escape(ylabel)}</text>')
        self.legend_y = TOP + 4

    def x(self, value: float) -> float:
        lo, hi = self.xt[0], self.xt[-1]
        return LEFT + (value - lo) / (hi - lo) * (WIDTH - RIGHT - LEFT)

    def y(self, value: float) -> float:
        lo, hi = self.yt[0], self.yt[-1]
        return HEIGHT - BOTTOM - (value - lo) / (hi - lo) * (HEIGHT - BOTTOM - TOP)

    def line(self, points: Sequence[Tuple[float, float]], colour: str, dash: str = ""):
        path = " ".join(f"{_num(self.x(a))},{_num(self.y(b))}" for a, b in points)
        style = f' stroke-dasharray="{dash}"' if dash else ""
        self.parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.5"{style}/>')

    def dot(self, a: float, b: float, colour: str, radius: float = 3, ring: bool = False):
        fill = "none" if ring else colour
        self.parts.append(f'<circle cx="{_num(self.x(a))}" cy="{_num(self.y(b))}" r="{radius:g}" fill="{fill}" '
                          f'stroke="{colour}" stroke-width="1.5"/>')

    def text(self, a: float, b: float, text: str, colour: str):
        self.parts.append(f'<text x="{_num(self.x(a) + 7)}" y="{_num(self.y(b) - 6)}" fill="{colour}">'
                          f'{escape(text)}</text>')

    def legend(self, text: str, colour: str, dash: str = ""):
        x, y = WIDTH - RIGHT + 12, self.legend_y
        style = f' stroke-dasharray="{dash}"' if dash else ""
        self.parts.append(f'<line x1="{x}" y1="{y}" x2="{x + 22}" y2="{y}" stroke="{colour}" '
                          f'stroke-width="1.5"{style}/>')
        self.parts.append(f'<text x="{x + 28}" y="{y + 4}">{escape(text)}</text>')
        self.legend_y += 18

    def svg(self) -> str:
        return "\n".join(self.parts + ["</svg>"]) + "\n"


def _padded(values: Sequence[float], share: float = 0.1) -> List[float]:
    """``values`` with two more, a ``share`` of their span (or of their size) beyond each end: no mark on an axis."""
    span = (max(values) - min(values)) or abs(max(values)) or 1.0
    return [min(values) - share * span, *values, max(values) + share * span]


def _metric(rows: Dict[str, Dict[int, Dict]]) -> str:
    # a quick row (``budget``) has no validation score of its own per epoch: its loss is drawn
    metrics = {r["validation"]["metric"].replace("budget", "loss") for runs in rows.values() for r in runs.values()}
    return metrics.pop() if len(metrics) == 1 else "bleu"


def curves_svg(title: str, rows: Dict[str, Dict[int, Dict]]) -> Optional[str]:
    """Validation score per epoch of every run that recorded its curve; None when none did."""
    metric = _metric(rows)
    series = []
    for i, (name, runs) in enumerate(rows.items()):
        for j, (seed, r) in enumerate(sorted(runs.items())):
            points = [(p["epoch"], p[metric]) for p in r.get("curve", []) if metric in p]
            if points:
                series.append((name, seed, COLOURS[i % len(COLOURS)], DASHES[j % len(DASHES)], points,
                               r.get("best_epoch")))
    if not series:
        return None
    xs = [0] + [a for s in series for a, _ in s[4]]
    ys = [b for s in series for _, b in s[4]]
    chart = Chart(title, "epoch", f"validation {metric}", xs, ys)
    named = set()
    for name, seed, colour, dash, points, best in series:
        chart.line(points, colour, dash)
        for a, b in points:
            if a == best:
                chart.dot(a, b, colour, radius=4, ring=True)
        if name not in named:
            named.add(name)
            chart.legend(name, colour)
    seeds = sorted({s[1] for s in series})
    for j, seed in enumerate(seeds):
        if len(seeds) > 1:
            chart.legend(f"seed {seed}", "#555", DASHES[j % len(DASHES)])
    return chart.svg()


def scores_svg(title: str, rows: Dict[str, Dict[int, Dict]], test: str) -> Optional[str]:
    """Test sacreBLEU against trained parameters (millions); None when no run has a test score."""
    marks = []
    for i, (name, runs) in enumerate(rows.items()):
        scores = [r["test"][test]["sacrebleu"] for r in runs.values() if test in r["test"]]
        if scores:
            trained = next(iter(runs.values()))["params"]["trained"] / 1e6
            marks.append((name, COLOURS[i % len(COLOURS)], trained, scores))
    if not marks:
        return None
    xs, ys = _padded([m[2] for m in marks]), _padded([s for m in marks for s in m[3]])
    chart = Chart(title, "trained parameters (millions)", f"{test} sacreBLEU", xs, ys)
    for name, colour, trained, scores in marks:
        for s in scores:
            chart.dot(trained, s, colour, radius=2.5)
        mean = sum(scores) / len(scores)
        chart.dot(trained, mean, colour, radius=6, ring=True)
        chart.text(trained, mean, name, colour)
        chart.legend(f"{name} ({len(scores)} seed{'s' if len(scores) > 1 else ''})", colour)
    return chart.svg()
