"""scripts/rare_word_f1.py: word F1 by training frequency for several systems side by side."""
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "scripts", "rare_word_f1.py")


def write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def test_two_systems_by_hand(tmp_path):
    # training counts: the x1000, dog x5, cat x1, sat x2; "mat" unseen
    train = write(tmp_path / "train.en", ["the"] * 1000 + ["dog"] * 5 + ["cat", "sat sat"])
    ref = write(tmp_path / "ref.en", ["the cat sat", "the dog"])
    a = write(tmp_path / "a.hyp", ["the cat sat", "the mat"])      # all of "1" and "2", misses dog, adds mat
    b = write(tmp_path / "b.hyp", ["the the dog", "dog"])          # "the" x2 against one in sentence 1
    proc = run("--train", train, "--ref", ref, "--hyp", f"A={a}", "--hyp", f"B={b}", "--json", str(tmp_path / "f.json"))
    assert proc.returncode == 0, proc.stderr
    scores = json.load(open(tmp_path / "f.json"))
    assert scores["A"]["1"]["f1"] == 100.0 and scores["A"]["2"]["f1"] == 100.0 and scores["A"]["5-9"]["f1"] == 0.0
    assert scores["A"]["unseen"] == {"f1": 0.0, "ref_words": 0, "hyp_words": 1}
    # B, bucket 1000+: hyp "the" x2 (both in sentence 1), ref "the" x2, matches min(2, 1) + min(0, 1) = 1
    # -> P 1/2, R 1/2 -> F1 50
    assert scores["B"]["1000+"] == {"f1": 50.0, "ref_words": 2, "hyp_words": 2}
    # B, bucket 5-9 (dog): hyp 2, ref 1, match 1 -> P 1/2, R 1 -> F1 2/3
    assert scores["B"]["5-9"]["f1"] == round(100 * 2 / 3, 2)
    assert "| 5-9 | 1 | 0.00 | 66.67 | +66.67 |" in proc.stdout
    assert proc.stdout.splitlines()[0] == "| training frequency | reference words | F1 A | F1 B | B - A |"


def test_errors_name_the_file(tmp_path):
    train = write(tmp_path / "train.en", ["a b"])
    ref = write(tmp_path / "ref.en", ["a", "b"])
    short = write(tmp_path / "short.hyp", ["a"])
    proc = run("--train", train, "--ref", ref, "--hyp", short)
    assert proc.returncode != 0 and f"--hyp {short} has 1 lines but --ref {ref} has 2" in proc.stderr
    proc = run("--train", train, "--ref", str(tmp_path / "nope.en"), "--hyp", short)
    assert proc.returncode != 0 and "--ref" in proc.stderr and "no such file" in proc.stderr


def test_outputs_checked_first_and_never_clobbered(tmp_path):
    train = write(tmp_path / "train.en", ["a b"])
    ref = write(tmp_path / "ref.en", ["a", "b"])
    hyp = write(tmp_path / "sys.hyp", ["a", "b"])
    table = tmp_path / "table.md"
    table.write_text("mine\n")
    proc = run("--train", train, "--ref", ref, "--hyp", hyp, "--output", str(table))
    assert proc.returncode != 0 and "--output" in proc.stderr and "--force" in proc.stderr
    assert table.read_text() == "mine\n"
    proc = run("--train", train, "--ref", ref, "--hyp", hyp, "--json", ref, "--force")  # an input, even with --force
    assert proc.returncode != 0 and "is also an input" in proc.stderr
    assert open(ref).read() == "a\nb\n"
    proc = run("--train", train, "--ref", ref, "--hyp", hyp, "--json", str(tmp_path / "missing" / "f.json"))
    assert proc.returncode != 0 and "does not exist" in proc.stderr
    proc = run("--train", train, "--ref", ref, "--hyp", hyp, "--output", str(table), "--force")
    assert proc.returncode == 0, proc.stderr
    assert table.read_text().startswith("| training frequency |")
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
