"""Per-second arrival counts of the Azure LLM inference trace 2023, as committed in planner/data/.

    .venv/bin/python -P scripts/derive_azure_llm_trace.py SPLITWISE_CSV OUT_CSV

SPLITWISE_CSV is `data/processed_traces/splitwise_conv.csv` or `splitwise_code.csv` of the vidur 0.0.26
source distribution on PyPI (`arrived_at,num_prefill_tokens,num_decode_tokens`: the Azure LLM inference
trace 2023, Microsoft, CC-BY-4.0, with arrival times in seconds from the first request). OUT_CSV gets
`time_s,rate`: the requests that arrived in each second, and a closing row at the end of the last second so
a replay holds every count for its second. Only the arrival times are kept; token counts are dropped
(docs/serving-simulation.md, "Workloads", says what was changed and why).
"""

from __future__ import annotations

import csv
import sys

import numpy as np


def per_second_counts(arrived_at: np.ndarray) -> np.ndarray:
    seconds = int(np.floor(arrived_at.max())) + 1
    return np.bincount(np.floor(arrived_at).astype(np.int64), minlength=seconds)


def main(source: str, target: str) -> None:
    with open(source, newline="") as handle:
        arrived_at = np.array([float(row["arrived_at"]) for row in csv.DictReader(handle)])
    counts = per_second_counts(arrived_at)
    with open(target, "w", newline="") as handle:
        handle.write("time_s,rate\n")
        handle.writelines(f"{second},{count}\n" for second, count in enumerate(counts))
        handle.write(f"{len(counts)},0\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
