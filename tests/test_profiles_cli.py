"""`tessera profiles export` writes the CSV that `tessera plan --measured` plans on."""

from __future__ import annotations

import json
import socket

import pytest
import yaml
from click.testing import CliRunner

from tessera.cli import main
from tessera.exit_codes import BAD_INPUT
from tessera.operator.profiling import jobs as pf
from tessera.planner.measured import load_measured, read_profiles_csv
from tessera.planner.profiles import ProfileSource, SegmentType
from tessera.profiler.results import Failure, FailureKind, Point, SweepResult, Target

BATCHES = (1, 2, 4, 8, 16, 32)


def _entry(variant: str, mig: str, mps: int, failed: bool = False) -> pf.StoredResult:
    target = Target(variant=variant, image_digest="", gpu="H100-80GB", mig_profile=mig, mps=mps, batches=BATCHES)
    if failed:
        return pf.StoredResult(job="j", target=target, result=SweepResult(
            target=target, failure=Failure.of(FailureKind.NOT_READY, "never ready")))
    points = tuple(Point(batch=b, p50_ms=0.2 + 0.02 * b, p99_ms=0.3 + 0.03 * b,
                         throughput_rps=round(mps * b * 1000 / (0.3 + 0.03 * b), 3), requests=40) for b in BATCHES)
    return pf.StoredResult(job="j", target=target, result=SweepResult(target=target, points=points))


def _configmaps_file(tmp_path) -> str:
    entries = [_entry("resnet50", mig, mps) for mig in ("1g.10gb", "1g.20gb") for mps in (1, 2)]
    entries.append(_entry("resnet101", "7g.80gb", 1, failed=True))
    items = []
    for variant in ("resnet50", "resnet101"):
        mine = [e for e in entries if e.target.variant == variant]
        items.append(pf.profiles_configmap(variant, "", pf.merged_data({}, mine)))
    path = tmp_path / "configmaps.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return str(path)


def test_export_from_a_file_of_configmaps_writes_every_measured_point_and_no_failure(tmp_path):
    out = tmp_path / "profiles.csv"
    result = CliRunner().invoke(main, ["profiles", "export", "--from-file", _configmaps_file(tmp_path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    rows = read_profiles_csv(out)
    assert len(rows) == 4 * len(BATCHES)
    assert {(r.variant, r.mig_profile, r.mps) for r in rows} == {
        ("resnet50", mig, mps) for mig in ("1g.10gb", "1g.20gb") for mps in (1, 2)}


def test_the_exported_csv_is_measured_profiles_for_the_planner(tmp_path):
    out = tmp_path / "profiles.csv"
    CliRunner().invoke(main, ["profiles", "export", "--from-file", _configmaps_file(tmp_path), "-o", str(out)])
    store = load_measured(out)
    profile = store.get("resnet50", SegmentType(gpu="H100-80GB", mig_profile="1g.10gb", mps=2), 8)
    assert profile.source is ProfileSource.MEASURED and profile.latency_ms == 0.3 + 0.03 * 8

    # Every one-slice segment of resnet50 measured (MPS up to 2): the cheapest plan rests on measurements.
    system = yaml.safe_load(open("examples/single-model.yaml"))
    system["spec"]["tasks"][0]["variants"] = system["spec"]["tasks"][0]["variants"][:1]
    (tmp_path / "resnet50.yaml").write_text(yaml.safe_dump(system))
    planned = CliRunner().invoke(main, ["plan", "--gpu", "H100-80GB", "--gpus", "2", "--max-mps", "2", "--measured",
                                        str(out), "--output", "json", str(tmp_path / "resnet50.yaml")])
    assert planned.exit_code == 0, planned.output
    plan = json.loads(planned.stdout)
    assert plan["profile_sources"] == {"measured": 1}


def test_a_csv_naming_an_unknown_mig_profile_is_bad_input(tmp_path):
    path = tmp_path / "bad.csv"
    header = ("variant,image,gpuProduct,migProfile,mpsDegree,batchSize,latencyP50Milliseconds,"
              "latencyP99Milliseconds,throughputRequestsPerSecond")
    path.write_text(header + "\nresnet50,,H100-80GB,9g.99gb,1,1,1,2,100\n")
    result = CliRunner().invoke(main, ["plan", "--gpu", "H100-80GB", "--measured", str(path), "examples/single-model.yaml"])
    assert result.exit_code == BAD_INPUT and "9g.99gb" in result.output


def test_export_and_import_carry_the_image_digest_results_are_keyed_by(tmp_path):
    from tessera.operator.profiling.exchange import entries_of_rows, rows_of

    digest = "sha256:" + "c" * 64
    target = Target(variant="resnet50", image="example.org/resnet50:1", image_digest=digest, gpu="H100-80GB",
                    mig_profile="1g.10gb", mps=1, batches=(1, 2))
    points = tuple(Point(batch=b, p50_ms=1.0 * b, p99_ms=2.0 * b, throughput_rps=100.0 * b, requests=9) for b in (1, 2))
    entry = pf.StoredResult(job="j", target=target, result=SweepResult(target=target, points=points),
                            observed_at="2026-01-01T00:00:00Z")
    path = tmp_path / "configmaps.yaml"
    path.write_text(yaml.safe_dump(pf.profiles_configmap("resnet50", digest, pf.merged_data({}, [entry]))))
    out = tmp_path / "profiles.csv"
    result = CliRunner().invoke(main, ["profiles", "export", "--from-file", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    rows = read_profiles_csv(out)
    assert {(r.image, r.image_digest) for r in rows} == {("example.org/resnet50:1", digest)}
    (imported,) = entries_of_rows(rows)
    assert pf.result_identity(imported.target) == pf.result_identity(target)  # keyed by the digest, not the tag
    assert imported.observed_at is None  # another cluster's report of the tag is not one of this cluster's
    assert rows_of([imported]) == rows

    # A file from before digests: no imageDigest column; a pinned reference still names its digest.
    old = tmp_path / "old.csv"
    header = ("variant,image,gpuProduct,migProfile,mpsDegree,batchSize,latencyP50Milliseconds,"
              "latencyP99Milliseconds,throughputRequestsPerSecond")
    old.write_text(header + f"\nresnet50,example.org/resnet50@{digest},H100-80GB,1g.10gb,1,1,1,2,100\n"
                            "resnet50,example.org/resnet50:1,H100-80GB,1g.10gb,1,1,1,2,100\n")
    keys = {e.target.image: pf.result_identity(e.target)[1] for e in entries_of_rows(read_profiles_csv(old))}
    assert keys == {f"example.org/resnet50@{digest}": digest, "example.org/resnet50:1": "ref:example.org/resnet50:1"}


HEADER = ("variant,image,gpuProduct,migProfile,mpsDegree,batchSize,latencyP50Milliseconds,"
          "latencyP99Milliseconds,throughputRequestsPerSecond")


def _kubeconfig(tmp_path, port: int) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return str(path)


@pytest.mark.parametrize("row, field", [
    ("resnet50,,H9000,1g.10gb,1,1,1,2,100", "gpuProduct"),
    ("resnet50,,H100-80GB,9g.99gb,1,1,1,2,100", "migProfile"),
    ("resnet50,,H100-80GB,1g.10gb,1,1,3,2,100", "latencyP99Milliseconds"),
], ids=["unknown-gpu", "unknown-mig-profile", "p50-above-p99"])
def test_import_refuses_a_malformed_row_before_contacting_the_cluster(tmp_path, row, field):
    path = tmp_path / "profiles.csv"
    path.write_text(f"{HEADER}\nresnet50,,H100-80GB,1g.10gb,1,1,1,2,100\n{row}\n")
    with socket.create_server(("127.0.0.1", 0)) as server:  # a cluster that would see any connection
        server.settimeout(0.2)
        result = CliRunner().invoke(main, ["profiles", "import", str(path), "--kubeconfig",
                                           _kubeconfig(tmp_path, server.getsockname()[1])])
        with pytest.raises(TimeoutError):
            server.accept()
    assert result.exit_code == BAD_INPUT
    assert f"{path}:3: {field}" in result.output


@pytest.mark.parametrize("command", [["import", "profiles.csv"], ["export"]], ids=["import", "export"])
def test_an_unreachable_cluster_is_one_line_naming_it(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "profiles.csv").write_text(f"{HEADER}\nresnet50,,H100-80GB,1g.10gb,1,1,1,2,100\n")
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]  # closed when the block ends: nothing listens there
    kubeconfig = _kubeconfig(tmp_path, port)
    result = CliRunner().invoke(main, ["profiles", *command, "--kubeconfig", kubeconfig])
    assert result.exit_code == 1, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"Error: cannot reach the cluster of {kubeconfig}: ") and "Connection refused" in line


@pytest.mark.parametrize("text, words", [
    ("- a\n- b\n", "expected a Kubernetes object or List (a mapping), got a list"),
    ("kind: List\nitems: {a: 1}\n", "items: expected a list of objects"),
    ("kind: List\nitems: [7, [1], {kind: ConfigMap, metadata: [x]}]\n", "no tessera profiles ConfigMap"),
], ids=["list-document", "items-mapping", "odd-items"])
def test_export_from_a_file_that_holds_no_configmaps_is_bad_input_naming_it(tmp_path, text, words):
    path = tmp_path / "configmaps.yaml"
    path.write_text(text)
    result = CliRunner().invoke(main, ["profiles", "export", "--from-file", str(path)])
    assert result.exit_code == BAD_INPUT, result.output
    assert f"{path}: {words}" in result.output
