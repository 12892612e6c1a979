"""``outlayers-vectors random``: unit vectors drawn uniformly on the sphere for every word of a target dictionary,
the same file for the same seed, read back by ``--target-vectors`` with full coverage."""
import hashlib
import math

import pytest
import torch

from fairseq_outlayers.methods.continuous.target_vectors import load_target_table, random_unit_vectors
from fairseq_outlayers.tools.vectors import main as vectors_main
from fairseq_outlayers.methods.shared_private.word_pairs.corpus import load_dictionary


def _dictionary(tmp_path, n=300):
    path = tmp_path / "dict.en.txt"
    path.write_text("".join(f"w{i} {1000 - i}\n" for i in range(n)), encoding="utf-8")
    return str(path)


def _sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_rows_are_unit_and_spread_like_uniform_directions():
    x = random_unit_vectors(4000, 64, seed=3).double()
    assert torch.allclose(x.norm(dim=1), torch.ones(4000, dtype=torch.float64), atol=1e-6)
    # uniform on the sphere: mean direction ~ 0 (each coordinate's mean has sd 1/sqrt(m n)), second moment I/m,
    # and the cosine of two rows has mean 0 and variance 1/m
    assert x.mean(0).abs().max() < 5 / math.sqrt(64 * 4000)
    assert torch.allclose(x.T @ x / 4000, torch.eye(64, dtype=torch.float64) / 64, atol=5 / (64 * math.sqrt(4000)))
    cos = (x[:2000] * x[2000:]).sum(1)
    assert abs(cos.mean().item()) < 5 / math.sqrt(64 * 2000)
    assert cos.var().item() == pytest.approx(1 / 64, rel=0.1)
    assert torch.equal(random_unit_vectors(10, 8, 3), random_unit_vectors(10, 8, 3))
    assert not torch.equal(random_unit_vectors(10, 8, 3), random_unit_vectors(10, 8, 4))


def test_the_file_covers_the_dictionary_and_is_the_same_for_the_same_seed(tmp_path, capsys):
    d = _dictionary(tmp_path)
    a, b, c = (str(tmp_path / name) for name in ("a.vec", "b.vec", "c.vec"))
    assert vectors_main(["random", d, a, "--dim", "16", "--seed", "7"]) == 0
    assert vectors_main(["random", d, b, "--dim", "16", "--seed", "7"]) == 0
    assert vectors_main(["random", d, c, "--dim", "16", "--seed", "8"]) == 0
    assert _sha(a) == _sha(b) != _sha(c)
    dictionary = load_dictionary(d)
    lines = open(a, encoding="utf-8").read().splitlines()
    assert lines[0] == f"{len(dictionary) - 1} 16"  # every symbol but <pad>
    table = load_target_table(dictionary, a, min_coverage=1.0)
    assert table.report.covered == table.report.eligible == 300
    rows = table.table[table.decodable]
    assert torch.allclose(rows.norm(dim=1), torch.ones(len(rows)), atol=1e-6)
    # the file's rows are the draw itself, in dictionary order without <pad>
    drawn = random_unit_vectors(len(dictionary) - 1, 16, 7)
    assert torch.allclose(table.table[dictionary.index("w0")], drawn[3], atol=1e-7)  # <s> (<pad>) </s> <unk> w0
    capsys.readouterr()


def test_an_existing_file_is_not_overwritten_without_force(tmp_path, capsys):
    d = _dictionary(tmp_path, 5)
    out = tmp_path / "r.vec"
    out.write_text("mine\n", encoding="utf-8")
    assert vectors_main(["random", d, str(out)]) == 1
    assert "exists" in capsys.readouterr().err and out.read_text(encoding="utf-8") == "mine\n"
    assert vectors_main(["random", d, str(out), "--force", "--dim", "4"]) == 0
    assert out.read_text(encoding="utf-8").splitlines()[0] == "8 4"
    with pytest.raises(SystemExit):
        vectors_main(["random", d, str(tmp_path / "x.vec"), "--dim", "0"])
