"""An option read from a list of command-line arguments before (or without) a parser: ``--name VALUE`` or
``--name=VALUE``, the last one given winning, as fairseq's argparse reads them. For the wrappers and the resume check
that look at fairseq-train/-generate arguments before fairseq parses them, the ledger's option lists and the
tests' in-process runner."""
from typing import Optional, Sequence


def option_value(argv: Sequence[str], name: str, default: Optional[str] = None) -> Optional[str]:
    """The value of option ``name`` in ``argv`` (the last one given), or ``default`` when it is not there."""
    value = default
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def option_given(argv: Sequence[str], name: str) -> bool:
    """Whether option ``name`` is in ``argv`` (``--name``, with or without ``=VALUE``)."""
    return any(arg == name or arg.startswith(name + "=") for arg in argv)
