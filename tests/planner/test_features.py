"""Feature switches A, S, T: parsing, labels, the ablation order."""

import pytest

from tessera.planner.features import Features, all_feature_sets


def switches(features: Features) -> tuple[bool, bool, bool]:
    return features.accuracy_scaling, features.spatial_partitioning, features.task_budgeting


def test_all_features_are_on_by_default():
    assert switches(Features()) == (True, True, True)


@pytest.mark.parametrize("text, expected", [
    ("A+S+T", (True, True, True)),
    ("s+t", (False, True, True)),
    ("A", (True, False, False)),
    ("T+A", (True, False, True)),
    (" a + s ", (True, True, False)),
    ("A,T", (True, False, True)),
])
def test_parse_reads_letters_joined_by_plus_in_any_case_and_order(text, expected):
    assert switches(Features.parse(text)) == expected


@pytest.mark.parametrize("text", ["unopt", "Unopt", "UNOPT", "none", ""])
def test_unopt_turns_every_feature_off(text):
    assert switches(Features.parse(text)) == (False, False, False)


@pytest.mark.parametrize("text, bad", [("A+X", "X"), ("Q", "Q"), ("A+S+T+Z", "Z"), ("AS", "AS")])
def test_an_unknown_letter_is_a_value_error_naming_it(text, bad):
    with pytest.raises(ValueError, match=f"unknown feature '{bad}'"):
        Features.parse(text)


@pytest.mark.parametrize("text, label", [("a+s+t", "A+S+T"), ("t+s", "S+T"), ("unopt", "Unopt"), ("t", "T")])
def test_label_lists_the_on_letters_in_canonical_order(text, label):
    assert Features.parse(text).label == label


def test_all_feature_sets_are_the_eight_subsets_in_ablation_order():
    assert [f.label for f in all_feature_sets()] == ["Unopt", "A", "S", "T", "A+S", "A+T", "S+T", "A+S+T"]


def test_a_label_parses_back_to_the_same_features():
    for features in all_feature_sets():
        assert Features.parse(features.label) == features
