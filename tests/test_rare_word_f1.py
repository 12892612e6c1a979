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


def test_seeds_averaged_detokenised_and_gzipped_hypotheses(tmp_path):
    """Several files of one system (a glob or commas): mean F1 in the table, each file's in the JSON; --tokenize
    Moses-tokenises detokenised hypotheses (the ledger's, gzipped or not); the distinct words used, last line."""
    import gzip

    train = write(tmp_path / "train.en", ["the"] * 1000 + ["dog"] * 5 + ["cat", "sat sat", "."])
    ref = write(tmp_path / "ref.en", ["the cat sat .", "the dog"])
    write(tmp_path / "a.seed1.hyp", ["the cat sat.", "the mat"])         # "sat." -> "sat ." by the tokeniser
    with gzip.open(tmp_path / "a.seed2.hyp.gz", "wt", encoding="utf-8") as f:
        f.write("the dog sat.\nthe dog\n")
    b = write(tmp_path / "b.hyp", ["the cat sat .", "the dog"])
    proc = run("--train", train, "--ref", ref, "--tokenize", "en", "--hyp", f"A={tmp_path}/a.seed*.hyp*",
               "--hyp", f"B={b},{b}", "--json", str(tmp_path / "f.json"))
    assert proc.returncode == 0, proc.stderr
    scores = json.load(open(tmp_path / "f.json"))
    # bucket "1" (cat and ".", 2 reference words): seed 1 matches both (F1 100); seed 2 has only "." -> P 1, R 1/2
    mean = round((100.0 + 66.67) / 2, 2)
    assert scores["A"]["1"]["f1_per_file"] == [100.0, 66.67] and scores["A"]["1"]["f1"] == mean
    assert scores["A"]["5-9"]["f1_per_file"] == [0.0, 66.67]  # dog: seed 2 hyp 2 (one in sentence 1), ref 1 -> 2/3
    assert scores["A"]["distinct_words_per_file"] == [5, 4] and scores["A"]["distinct_words"] == 4.5
    assert scores["B"]["1"]["f1"] == 100.0 and scores["B"]["distinct_words"] == 5.0
    lines = proc.stdout.splitlines()
    assert lines[0] == "| training frequency | reference words | F1 A (mean of 2) | F1 B (mean of 2) | B - A |"
    assert f"| 1 | 2 | {mean:.2f} | 100.00 | {100 - mean:+.2f} |" in lines
    assert lines[-1] == "| distinct words used | 5 | 4.5 | 5.0 | +0.5 |"
    proc = run("--train", train, "--ref", ref, "--hyp", f"A={tmp_path}/none*.hyp")
    assert proc.returncode != 0 and "none*.hyp: no file matches" in proc.stderr


def test_a_latin1_or_damaged_hypothesis_is_one_line_naming_the_file_and_line(tmp_path):
    train = write(tmp_path / "train.en", ["a b"])
    ref = write(tmp_path / "ref.en", ["a", "b", "c"])
    hyp = tmp_path / "sys.hyp"
    hyp.write_bytes("a\nb\ncaf\xe9\n".encode("latin-1"))
    proc = run("--train", train, "--ref", ref, "--hyp", str(hyp))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (f"rare_word_f1.py: error: {hyp}:3: --hyp is not valid UTF-8 (byte b'\\xe9'); "
                                   "re-encode it as UTF-8 (e.g. iconv -f latin1 -t utf-8)")
    gz = tmp_path / "sys.hyp.gz"
    gz.write_bytes(b"\x1f\x8b\x08garbage")
    proc = run("--train", train, "--ref", ref, "--hyp", str(gz))
    assert proc.returncode == 1 and "is not a complete gzip file" in proc.stderr and "Traceback" not in proc.stderr
    (tmp_path / "ref.en").write_text("")
    proc = run("--train", train, "--ref", ref, "--hyp", str(hyp))
    assert proc.returncode == 1 and f"--ref '{ref}' is empty" in proc.stderr
