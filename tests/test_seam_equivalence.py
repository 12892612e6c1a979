"""The parsed arguments, the built model's arguments and its state-dict keys (with shapes) of every ``outlayers_*``
architecture x ``--output-layer`` x ``--embeddings`` are those recorded in ``tests/expected/seams.json``; a
combination refused then is refused now, with an error of the same class (``tests/seam_equivalence.py``)."""
import json

from seam_equivalence import EXPECTED, differences, record


def test_every_architecture_and_seam_combination_is_unchanged():
    with open(EXPECTED, encoding="utf-8") as f:
        expected = json.load(f)
    got = record()
    assert len(got) == len(expected["combos"]) > 300
    diff = differences(expected, got)
    assert not diff, "\n".join(diff)
