"""Rebuilding a shared-private model from its checkpoint (fairseq-generate) scans the dictionary's symbols once, not
once per word: the placeholder pairs took 8 s to start fairseq-generate at 4,400 words when they did."""
from fairseq.data import Dictionary

from fairseq_outlayers.methods.shared_private import register as spe
from fairseq_outlayers.methods.shared_private.word_pairs import corpus


def test_placeholder_pairs_scan_the_dictionary_once(monkeypatch):
    d = Dictionary()
    for i in range(300):
        d.add_symbol(f"w{i}")
    d.pad_to_multiple_(8)  # madeupword fillers: special, never paired
    calls = []

    def counted(dictionary):
        calls.append(1)
        return corpus.special_indices(dictionary)

    monkeypatch.setattr(spe, "special_indices", counted)
    pairs = spe._placeholder_pairs(d, {"lm": 100, "wf": 50, "ur": 20})
    assert len(calls) == 1
    flat = pairs["lm"] + pairs["wf"] + pairs["ur"]
    assert [len(pairs[c]) for c in ("lm", "wf", "ur")] == [100, 50, 20] and len(set(flat)) == 170
    assert not set(flat) & corpus.special_indices(d)
