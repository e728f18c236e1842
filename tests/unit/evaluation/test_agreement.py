import pytest

from kyai.evaluation import agreement, cohen_kappa


def test_kappa_known_values() -> None:
    # Two raters, 10 items: classic 2x2 table a=4 (both pass), b=1, c=1, d=4 (both fail).
    first = [True] * 4 + [True] + [False] + [False] * 4
    second = [True] * 4 + [False] + [True] + [False] * 4
    # observed 0.8, expected 0.5 -> kappa 0.6
    assert cohen_kappa(first, second) == pytest.approx(0.6)
    assert cohen_kappa(first, first) == pytest.approx(1.0)
    assert cohen_kappa([True, False], [False, True]) == pytest.approx(-1.0)


def test_kappa_undefined_without_variation() -> None:
    assert cohen_kappa([True, True], [True, True]) is None
    assert cohen_kappa([], []) is None


def test_pairwise_agreement() -> None:
    pairs = agreement(
        {"llm": [1.0, 0.0, 0.5, 1.0], "builtin": [1.0, 0.0, 0.0, 0.0], "py": [1.0] * 4}
    )
    assert [p["judges"] for p in pairs] == [["llm", "builtin"], ["llm", "py"], ["builtin", "py"]]
    first = pairs[0]
    assert first["exact_agreement"] == 0.5
    assert first["mean_absolute_difference"] == pytest.approx((0 + 0 + 0.5 + 1) / 4)
    # pass marks: llm T F T T, builtin T F F F -> observed 0.5, expected 0.75*0.25+0.25*0.75
    assert first["cohen_kappa"] == pytest.approx((0.5 - 0.375) / (1 - 0.375))
    # "py" passes everything: agreement is exactly what chance gives.
    assert pairs[1]["cohen_kappa"] == pytest.approx(0.0)
