"""scripts/bench_decode.py --checkpoints: its options and its fairseq-generate section, without running fairseq
(the runs are faked; nothing is timed)."""
from argparse import Namespace

import pytest

from fairseq_outlayers.lab.bench import decode_generate as dg


def test_specs_and_the_translated_line():
    assert dg.parse_specs(["softmax=a.pt", "continuous, faiss=b.pt"], "--checkpoints") == {
        "softmax": "a.pt", "continuous, faiss": "b.pt"}
    for bad in (["softmax"], ["=a.pt"], ["a=x", "a=y"]):
        with pytest.raises(ValueError):
            dg.parse_specs(bad, "--checkpoints")
    text = "INFO | Translated 1,000 sentences (13,512 tokens) in 7.1s (140.85 sentences/s, 1903.1 tokens/s)"
    assert dg.read_translated(text) == (1000, 13512, 7.1)
    with pytest.raises(RuntimeError):
        dg.read_translated("no such line")


def test_rounds_rotate_and_ratios_are_per_round(monkeypatch):
    calls = []

    def fake(data, checkpoint, beam, batch, threads, extra=(), split="test"):
        calls.append((checkpoint, beam, tuple(extra)))
        seconds = {"s.pt": 2.0, "f.pt": 4.0}[checkpoint] * (1 + len(calls) % 2)  # a noisy machine
        return dict(sentences=10, tokens=100, seconds=seconds, wall=seconds + 1, hypotheses=["a b"] * 10)

    monkeypatch.setattr(dg, "run_generate", fake)
    monkeypatch.setattr(dg, "checkpoint_updates", lambda path: 400)
    monkeypatch.setattr(dg, "bleu", lambda hyps, refs, lang, lower: 12.5)
    args = Namespace(data="d", beams=[1, 5], generate_rounds=2, generate_batch_size=64, threads=1, split="test",
                     target_lang="en", lowercase=True)
    models, extras = {"softmax": "s.pt", "fixed": "f.pt"}, {"fixed": ["--x", "1"]}
    results = dg.measure(models, extras, args, log=lambda *a, **k: None)
    assert len(calls) == 1 + 2 * 2 * 2 and calls[0] == ("s.pt", 1, ())  # one untimed run first
    assert [c[0] for c in calls[1:3]] == ["s.pt", "f.pt"] and [c[0] for c in calls[5:7]] == ["f.pt", "s.pt"]
    assert all(c[2] == ("--x", "1") for c in calls if c[0] == "f.pt")
    for beam in (1, 5):
        assert results[beam]["softmax"]["ratios"] == [1.0, 1.0]
        ratios = results[beam]["fixed"]["ratios"]
        assert len(ratios) == 2 and all(r in (0.25, 0.5, 1.0) for r in ratios)
    text = "\n".join(dg.report(models, extras, results, args, ["ref"] * 10))
    assert "## fairseq-generate on trained models" in text and "`--x 1`" in text and "| 400 | 12.50 |" in text
