"""The profiler's result: a termination message within 4 KiB, exit codes per failure."""

import pytest

from tessera.profiler.results import (
    MAX_BATCHES, MESSAGE_LIMIT, TERMINATION_MESSAGE_LIMIT, DeviceIdentity, ExitCode, Failure, FailureKind, Point, SweepResult,
    Target,
)

BATCHES = tuple(2 ** i for i in range(MAX_BATCHES))


def full_result() -> SweepResult:
    """The largest result a Job writes: every batch size it may have, a device, the longest failure message."""
    target = Target(variant="v" * 63, image="r" * 512, image_digest="sha256:" + "f" * 64, gpu="H200-141GB",
                    mig_profile="1g.18gb", mps=7, batches=BATCHES)
    device = DeviceIdentity(product="NVIDIA H200", mig_profile="1g.18gb", uuid="MIG-" + "a" * 36,
                            driver="570.124.06", memory_mb=16384.0)
    points = tuple(Point(batch=b, p50_ms=12345.678, p99_ms=23456.789, throughput_rps=123456.789,
                         peak_memory_mb=143771.5, requests=100000) for b in BATCHES)
    return SweepResult(target=target, device=device, points=points,
                       failure=Failure.of(FailureKind.OUT_OF_MEMORY, "x" * 10_000, batch=BATCHES[-1]))


def test_the_largest_result_fits_a_termination_message_and_reads_back():
    result = full_result()
    message = result.termination_message()
    assert len(message.encode()) <= TERMINATION_MESSAGE_LIMIT
    assert SweepResult.from_termination_message(message) == result


def test_a_failure_keeps_a_bounded_part_of_the_servers_message():
    assert len(full_result().failure.message) == MESSAGE_LIMIT


def test_a_target_with_more_batch_sizes_than_a_result_holds_is_refused():
    with pytest.raises(ValueError, match="at most 16"):
        Target(variant="v", gpu="A100-80GB", mig_profile="1g.10gb", batches=tuple(range(1, MAX_BATCHES + 2)))


@pytest.mark.parametrize("kind", list(FailureKind))
def test_every_failure_kind_has_its_own_nonzero_exit_code(kind):
    assert kind.exit_code not in (ExitCode.COMPLETE, ExitCode.USAGE)
    assert ExitCode[kind.name] == kind.exit_code


def test_remaining_batches_are_the_targets_not_yet_measured_in_order():
    result = SweepResult(target=Target(variant="v", gpu="A100-80GB", mig_profile="", batches=(1, 4, 2)),
                         points=(Point(batch=4, p50_ms=1, p99_ms=1, throughput_rps=1, requests=1),))
    assert result.remaining_batches() == (1, 2)


def test_a_result_stored_before_digests_reads_its_image_reference_as_the_image():
    old = Target.model_validate_json('{"variant":"v","image_digest":"example.org/m:1","gpu":"A100-80GB",'
                                     '"mig_profile":"1g.10gb","batches":[1]}')
    assert old.image == "example.org/m:1" and old.image_digest == ""
    digest = "sha256:" + "0" * 64
    new = Target(variant="v", image="example.org/m:1", image_digest=digest, gpu="A100-80GB", mig_profile="1g.10gb",
                 batches=(1,))
    assert Target.model_validate_json(new.model_dump_json()) == new
