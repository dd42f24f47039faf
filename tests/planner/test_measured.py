import pytest

from tessera.planner.measured import load_parvagpu_csv, load_parvagpu_dir, read_parvagpu_csv
from tessera.planner.profiles import ProfileSource, SegmentType


def segment(mig: str, mps: int = 1) -> SegmentType:
    return SegmentType(gpu="A100-80GB", mig_profile=mig, mps=mps)


def test_zero_rows_are_missing(measurements):
    store = load_parvagpu_csv(measurements / "resnet50.csv", "resnet50")
    # resnet50.csv: "1,16,4,0,0" (out of memory) and "1,32,2,0,0"
    assert store.get("resnet50", segment("1g.10gb", 4), 16) is None
    assert store.get("resnet50", segment("1g.10gb", 2), 32) is None
    data_rows = [line for line in (measurements / "resnet50.csv").read_text().splitlines()[1:]
                 if line.split(",")[3] not in ("0", "0.0")]
    assert len(store) == len(data_rows)


def test_segment_throughput_is_per_process_throughput_times_processes(measurements):
    store = load_parvagpu_csv(measurements / "resnet50.csv", "resnet50")
    # "1,1,2,125.968,0.008": two processes, 125.968 requests/s each
    assert store.get("resnet50", segment("1g.10gb", 2), 1).throughput_rps == pytest.approx(2 * 125.968)


def test_batch_latency_is_derived_from_throughput_not_the_rounded_column(measurements):
    store = load_parvagpu_csv(measurements / "resnet50.csv", "resnet50")
    # "1,8,1,358.277,0.022": 8 / 358.277 s = 22.33 ms, not the rounded 22 ms
    assert store.get("resnet50", segment("1g.10gb"), 8).latency_ms == pytest.approx(8000 / 358.277)


def test_mig_instance_sizes_map_to_a100_80gb_profiles(measurements):
    rows = read_parvagpu_csv(measurements / "vgg16.csv", "vgg16")
    assert {r.segment.mig_profile for r in rows} == {"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}
    assert {r.segment.mps for r in rows} == {1, 2, 3, 4, 5}


def test_directory_import_names_variants_after_files_and_marks_them_measured(measurements):
    store = load_parvagpu_dir(measurements)
    profile = store.get("bert", segment("7g.80gb"), 1)
    assert profile is not None and profile.source is ProfileSource.MEASURED
    assert store.get("mobilenetv2", segment("3g.40gb", 2), 4) is not None


def test_wrong_header_names_the_file(tmp_path):
    bad = tmp_path / "model.csv"
    bad.write_text("slices,batch,procs,thr,lat\n1,1,1,10,0.1\n")
    with pytest.raises(ValueError, match="model.csv"):
        read_parvagpu_csv(bad, "model")


def test_unknown_instance_size_names_file_and_line(tmp_path):
    bad = tmp_path / "model.csv"
    bad.write_text("Mig instance,Batch size,Workload Number,Throughput,Latency\n5,1,1,10,0.1\n")
    with pytest.raises(ValueError, match=r"model.csv:2: .*5 compute slices"):
        read_parvagpu_csv(bad, "model")
