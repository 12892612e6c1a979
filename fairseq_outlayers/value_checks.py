"""Checks of option values, made where the options are read: a finite number in a stated range, a size that fits
in memory. A failed check is one line that names the option, the value given, the allowed range and the fix.

    MARGIN = Range(0, 2, low_open=True, why="a gap between two cosines is at most 2")
    MARGIN.check("--margin", value)                         # OutlayersConfigError when out of range
    parser.add_argument("--k", type=Range(1, integer=True))  # argparse: "argument --k: must be ..."
    check_fits("--decoder-embed-dim", n, per_unit=16 * V, what="the output matrix", fix="use 512")

NaN and infinities are outside every range; so are booleans and, for ``integer`` ranges, fractions.
"""
import argparse
import dataclasses
import math
import numbers
import os
from dataclasses import dataclass
from typing import Optional

from fairseq_outlayers.errors import OutlayersConfigError

#: bytes per trained float32 parameter: the weight, its gradient and Adam's two moments
TRAINED_BYTES = 16
#: bytes per frozen float32 value (a buffer)
FROZEN_BYTES = 4


def fmt(value) -> str:
    """A number as a user would type it (``1000000``, ``0.1``, ``1e+30``, ``inf``, ``nan``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return str(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    value = float(value)
    if math.isfinite(value) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


@dataclass(frozen=True)
class Range:
    """Allowed values of one option: ``low``/``high`` bounds (None: unbounded), open or closed, integers
    (``integer``) or finite reals. ``why``: the reason for the bounds (shown in brackets); ``fix``: what to do
    instead."""
    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    why: str = ""
    fix: str = ""

    def describe(self) -> str:
        if self.integer and self.high is None and self.low in (0, 1) and not self.low_open:
            return "a positive integer" if self.low == 1 else "a non-negative integer"
        kind = "an integer" if self.integer else "a finite number"
        if self.low is not None and self.high is not None:
            return (f"{'an integer ' if self.integer else ''}in {'(' if self.low_open else '['}{fmt(self.low)}, "
                    f"{fmt(self.high)}{')' if self.high_open else ']'}")
        if self.low is not None:
            return f"{kind} {'>' if self.low_open else '>='} {fmt(self.low)}"
        if self.high is not None:
            return f"{kind} {'<' if self.high_open else '<='} {fmt(self.high)}"
        return kind

    def contains(self, value) -> bool:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        if not isinstance(value, numbers.Integral) and not math.isfinite(float(value)):
            return False
        if self.integer and not isinstance(value, numbers.Integral) and not float(value).is_integer():
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            return False
        return True

    def requirement(self, value, fix: str) -> str:
        why = f" ({self.why})" if self.why else ""
        return f"must be {self.describe()}, got {fmt(value)}{why}; {fix}"

    def message(self, option: str, value, fix: Optional[str] = None) -> str:
        return f"{option} {self.requirement(value, fix or self.fix or f'give {option} a value in that range')}"

    def check(self, option: str, value, fix: Optional[str] = None):
        """``value`` when it is in the range, else an ``OutlayersConfigError`` (``fix``: overrides the range's)."""
        if not self.contains(value):
            raise OutlayersConfigError(self.message(option, value, fix))
        return int(value) if self.integer else value

    def __call__(self, text: str):
        """As an argparse ``type=``: the parsed value, or ``ArgumentTypeError`` (argparse names the option)."""
        try:
            value = int(text) if self.integer else float(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"must be {self.describe()}, got '{text}'") from None
        if not self.contains(value):
            raise argparse.ArgumentTypeError(self.requirement(value, self.fix or "give a value in that range"))
        return value


def check_values(ranges, values: dict, defaults=None, flags=None):
    """Check ``values`` ({dest: value}) against ``ranges`` ({dest: Range}); None values (unset) are skipped.
    ``flags``: {dest: option name} (default ``--dest-with-dashes``); ``defaults``: {dest: default}, named in the fix."""
    for dest, allowed in ranges.items():
        value = values.get(dest)
        if value is None:
            continue
        flag = (flags or {}).get(dest) or "--" + dest.replace("_", "-")
        default = (defaults or {}).get(dest)
        fix = None if allowed.fix or default is None else (f"give a value in that range, or leave {flag} out for "
                                                            f"its default {fmt(default)}")
        allowed.check(flag, value, fix)


def config_defaults(config_class) -> dict:
    """{field: default} of a dataclass (a criterion's FairseqDataclass), for the fix of a message."""

    return {f.name: f.default for f in dataclasses.fields(config_class) if f.default is not dataclasses.MISSING}


class CheckedOptions:
    """A criterion's option ranges (``option_ranges``: {option: Range}), checked when the options are parsed,
    before any data is read (``check_options``: the core's build calls it for outlayers_* models). The defaults of
    ``options_config``, the criterion's dataclass, go into the messages' fixes."""

    option_ranges: dict = {}
    options_config = None

    @classmethod
    def option_defaults(cls) -> dict:
        return config_defaults(cls.options_config) if cls.options_config is not None else {}

    @classmethod
    def check_options(cls, read):
        """The options' ranges when they are parsed (``read(name)``: the value given, or None)."""
        check_values(cls.option_ranges, {name: read(name) for name in cls.option_ranges}, cls.option_defaults())


def human_bytes(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} PiB"  # pragma: no cover


def memory_bytes() -> Optional[int]:
    """This machine's main memory (the cgroup's limit where lower), or None where it cannot be read. fairseq builds
    every model in main memory before moving it to a GPU, so a model larger than this cannot be trained here."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = None
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path, encoding="ascii") as f:
                limit = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if limit > 0 and (total is None or limit < total):
            total = limit
    return total


def check_fits(option: str, value, per_unit: float, what: str, fix: str, fixed: float = 0.0,
               memory: Optional[int] = None):
    """Refuse a size whose memory, ``fixed + value * per_unit`` bytes (``what``: for what, in words), exceeds the
    machine's (``memory``, default ``memory_bytes()``); the message states the estimate and the largest value that
    fits."""
    memory = memory_bytes() if memory is None else memory
    needed = fixed + float(value) * per_unit
    if not memory or needed <= memory:
        return
    largest = max(int((memory - fixed) // per_unit), 0) if per_unit > 0 else 0
    raise OutlayersConfigError(
        f"{option} {fmt(value)} needs about {human_bytes(needed)} of memory for {what}, more than the "
        f"{human_bytes(memory)} this machine has (the largest value that fits is {largest:,d}); {fix}")


#: fairseq's decoding sizes, checked by outlayers-generate/-interactive before fairseq parses them (fairseq itself
#: accepts --beam 0 and fails later with a traceback)
DECODING_RANGES = {"--beam": Range(1, integer=True, fix="use e.g. --beam 5 (or 1 for greedy decoding)"),
                   "--nbest": Range(1, integer=True, fix="use --nbest 1 (the best hypothesis) up to --beam")}


def check_decoding_argv(argv):
    """Refuse a --beam or --nbest below 1, or --nbest above --beam, in a fairseq decoding command line (one line);
    values that are not integers are left to fairseq's own parser."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    for flag in DECODING_RANGES:
        parser.add_argument(flag)
    try:
        known, _ = parser.parse_known_args(list(argv))
    except (argparse.ArgumentError, SystemExit):
        return
    values = {}
    for flag, allowed in DECODING_RANGES.items():
        text = getattr(known, flag[2:])
        try:
            values[flag] = int(text) if text is not None else None
        except ValueError:
            continue
        if values[flag] is not None:
            allowed.check(flag, values[flag])
    beam, nbest = values.get("--beam") or 5, values.get("--nbest")  # fairseq's default beam is 5
    if nbest is not None and nbest > beam:
        raise OutlayersConfigError(f"--nbest {nbest} is more than the --beam {beam} hypotheses kept; use --nbest "
                                   f"{beam} or less, or a larger --beam")


#: argparse types shared by the package's tools
POSITIVE_INT = Range(1, integer=True)
NON_NEGATIVE_INT = Range(0, integer=True)
FINITE = Range()
BEAM = Range(1, integer=True, fix="use e.g. 5 (or 1 for greedy decoding)")
LEARNING_RATE = Range(0, 10, low_open=True, why="Adam moves each value by about the rate per update")
LENGTH_PENALTY = Range(-10, 10, fix="use e.g. fairseq's default 1.0 (no preference for length)")
