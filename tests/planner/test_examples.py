import pytest
import yaml

from tessera.planner.catalog import CATALOG
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.profiles import DEFAULT_BATCHES
from tessera.planner.spec_file import SpecFileError, load_systems

from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))


def test_the_four_examples_exist():
    assert {f.stem for f in EXAMPLE_FILES} >= {"traffic-analysis", "social-media", "ar-assistant", "single-model"}


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_every_example_is_a_kubernetes_object_named_after_its_file(path):
    document = yaml.safe_load(path.read_text())
    assert document["apiVersion"] == "tessera.ai/v1alpha1"
    assert document["kind"] == "CompoundInferenceSystem"
    assert document["metadata"]["name"] == path.stem
    assert "name" not in document["spec"]
    [system] = load_systems(path)
    assert system.name == path.stem


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_every_variant_has_estimator_figures_and_a_source(path):
    for system in load_systems(path):
        for task in system.tasks:
            for variant in task.variants:
                assert variant.gflops and variant.params_millions and variant.layers, variant.name
                assert variant.source, variant.name
            assert task.best_accuracy == 1.0, task.name


@pytest.mark.parametrize("gpu", sorted(CATALOG))
@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_every_example_gets_a_complete_store_on_every_catalog_gpu(path, gpu):
    systems = load_systems(path)
    store = build_profile_store(systems, gpu)
    for system in systems:
        for task in system.tasks:
            for variant in task.variants:
                batches = {batch for _, batch, _ in store.for_variant(variant.name)}
                assert batches == set(DEFAULT_BATCHES), (system.name, task.name, variant.name)


def test_detector_variant_sets_the_demand_on_car_classification():
    [traffic] = load_systems(EXAMPLES / "traffic-analysis.yaml")
    small = traffic.demand({"object-detection": "yolov5n", "car-classification": "efficientnet-b0",
                            "facial-recognition": "gendernet"})
    large = traffic.demand({"object-detection": "yolov5x", "car-classification": "efficientnet-b0",
                            "facial-recognition": "gendernet"})
    assert small["car-classification"] == pytest.approx(50 * 2.584 * 0.768, rel=1e-3)
    assert large["car-classification"] == pytest.approx(50 * 18.894 * 0.943, rel=1e-3)


def test_all_examples_load_together_from_one_multi_document_file(tmp_path):
    combined = tmp_path / "all.yaml"
    combined.write_text("\n---\n".join(f.read_text() for f in EXAMPLE_FILES))
    assert [s.name for s in load_systems(combined)] == [f.stem for f in EXAMPLE_FILES]


def test_a_bare_system_spec_with_a_name_loads(tmp_path):
    bare = tmp_path / "bare.yaml"
    bare.write_text("name: tiny\nslo: {latencyMilliseconds: 100}\ndemandRequestsPerSecond: 5\n"
                    "tasks: [{name: t, variants: [{name: v, accuracy: 1, gpuMemoryGigabytes: 1, gigaflopsPerRequest: 1, parametersMillions: 1}]}]\n")
    assert load_systems(bare)[0].name == "tiny"


def test_spec_file_errors_name_the_file_and_the_document(tmp_path):
    broken = tmp_path / "broken.yaml"
    good = (EXAMPLES / "single-model.yaml").read_text()
    broken.write_text(good + "\n---\n" + good.replace("name: single-model", "name: other").replace(
        "latencyMilliseconds: 250", "latencyMilliseconds: -1"))
    with pytest.raises(SpecFileError, match=r"broken.yaml, document 2 \(other\).*latencyMilliseconds"):
        load_systems(broken)
