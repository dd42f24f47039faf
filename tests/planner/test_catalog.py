"""The GPU catalog's MIG layouts agree with NVIDIA's MIG user guide."""

import re

import pytest

from tessera.planner.catalog import (
    CATALOG, COMPUTE_SLICES, MEMORY_SLICES, gpu_product, layout_name, valid_layouts,
)


def layout(*parts: tuple[str, int]):
    return tuple(sorted(parts))


def test_the_catalog_holds_the_four_products():
    assert set(CATALOG) == {"A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB"}


def test_an_unknown_product_is_a_key_error_listing_the_known_ones():
    with pytest.raises(KeyError, match="unknown GPU product 'T4'.*A100-40GB"):
        gpu_product("T4")


@pytest.mark.parametrize("valid", [
    layout(("4g.20gb", 1), ("2g.10gb", 1), ("1g.5gb", 1)),
    layout(("3g.20gb", 2)),
    layout(("1g.5gb", 7)),
    layout(("2g.10gb", 3), ("1g.5gb", 1)),
    layout(("3g.20gb", 1), ("2g.10gb", 2)),
    layout(("7g.40gb", 1)),
    layout(("1g.10gb", 4)),
], ids=layout_name)
def test_layouts_the_mig_guide_allows_on_a100_40gb_are_valid(valid):
    assert valid in valid_layouts("A100-40GB")


@pytest.mark.parametrize("invalid", [
    layout(("4g.20gb", 2)),
    layout(("3g.20gb", 3)),
    layout(("1g.5gb", 8)),
    layout(("3g.20gb", 2), ("1g.5gb", 1)),
    layout(("1g.10gb", 5)),
    layout(("7g.40gb", 1), ("1g.5gb", 1)),
    layout(("7g.40gb", 2)),
], ids=layout_name)
def test_layouts_the_mig_guide_forbids_on_a100_40gb_are_not_valid(invalid):
    assert invalid not in valid_layouts("A100-40GB")


def test_a_whole_gpu_instance_is_never_combined_with_another():
    for gpu in CATALOG:
        whole = gpu_product(gpu).whole_gpu_profile.name
        with_whole = [lay for lay in valid_layouts(gpu) if whole in dict(lay)]
        assert with_whole == [((whole, 1),)], gpu


@pytest.mark.parametrize("gpu", sorted(CATALOG))
def test_every_layout_fits_seven_compute_and_eight_memory_slices(gpu):
    product = gpu_product(gpu)
    for lay in valid_layouts(gpu):
        compute = sum(product.profile(name).compute_slices * count for name, count in lay)
        memory = sum(product.profile(name).memory_slices * count for name, count in lay)
        assert compute <= COMPUTE_SLICES and memory <= MEMORY_SLICES, lay


@pytest.mark.parametrize("gpu", sorted(CATALOG))
def test_every_layout_respects_each_profiles_max_count(gpu):
    product = gpu_product(gpu)
    for lay in valid_layouts(gpu):
        for name, count in lay:
            assert 1 <= count <= product.profile(name).max_count, lay


@pytest.mark.parametrize("gpu", sorted(CATALOG))
def test_layouts_are_distinct_sorted_pairs(gpu):
    layouts = valid_layouts(gpu)
    assert len(set(layouts)) == len(layouts)
    assert all(lay == tuple(sorted(lay)) and lay for lay in layouts)


def test_h100_80gb_has_the_a100_40gb_shapes_under_its_own_names():
    a100, h100 = gpu_product("A100-40GB"), gpu_product("H100-80GB")
    rename = {a.name: h.name for a, h in zip(a100.profiles, h100.profiles, strict=True)}
    assert rename == {"1g.5gb": "1g.10gb", "1g.10gb": "1g.20gb", "2g.10gb": "2g.20gb",
                      "3g.20gb": "3g.40gb", "4g.20gb": "4g.40gb", "7g.40gb": "7g.80gb"}
    renamed = {tuple(sorted((rename[name], count) for name, count in lay)) for lay in valid_layouts("A100-40GB")}
    assert renamed == set(valid_layouts("H100-80GB"))


def test_the_whole_gpu_profile_of_each_product():
    assert {gpu: gpu_product(gpu).whole_gpu_profile.name for gpu in CATALOG} == {
        "A100-40GB": "7g.40gb", "A100-80GB": "7g.80gb", "H100-80GB": "7g.80gb", "H200-141GB": "7g.141gb"}


def test_layout_name_joins_profile_and_count():
    assert layout_name(layout(("3g.40gb", 2), ("1g.10gb", 1))) == "1g.10gbx1.3g.40gbx2"


@pytest.mark.parametrize("gpu", sorted(CATALOG))
def test_layout_names_are_distinct_kubernetes_label_values(gpu):
    names = [layout_name(lay) for lay in valid_layouts(gpu)]
    assert len(set(names)) == len(names)
    label = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
    assert all(label.match(name) for name in names), [n for n in names if not label.match(n)]
