"""Constants of the twin's event loop, shared by its builds (kernel.py chooses one).

The loop itself (see ``_numba_kernel.py`` for the commented reference version
and ``_kernel.c`` for its C port) advances from one engine step to the next;
when the server is idle it jumps to the next arrival, so time is driven by
events, never by a fixed tick. Waiting requests live in one FIFO per adapter
and the adapters with waiting requests in an indexed min-heap keyed on the
FCFS key of their head request, so no step does work proportional to the
waiting queue.
"""

from __future__ import annotations

# request states
NOT_ARRIVED = 0
WAITING = 1
RUNNING = 2
FINISHED = 3
DROPPED = 4

# indices into the float parameter vector
P_DURATION = 0
P_MAX_TOKENS = 1
P_MAX_SEQS = 2
P_MAX_LORAS = 3
P_KV_BLOCKS = 4
P_BLOCK = 5
P_PREALLOC = 6
P_CAP = 7
P_STEP_A = 8  # ms, fixed cost of a step
P_STEP_B = 9  # ms per decoding request
P_STEP_C = 10  # ms per prefill token
P_LORA_C0 = 11  # multiplier with LoRA enabled, n = 0
P_LORA_C1 = 12  # multiplier increase per distinct adapter in the batch
P_OVH_C0 = 13  # ms scheduler overhead per step
P_OVH_RUN = 14  # ms per running request
P_OVH_WAIT = 15  # ms per waiting request
P_SAMPLE_DT = 16  # s between time-series samples
P_SLOT_MS = 17  # ms per adapter slot (--max-loras + 1) per step: the LoRA kernels' grid
P_WAIT_SKIPPED = 18  # 1: the per-waiting cost counts only the requests the LoRA rule skips (0: every one)
P_SET_ORDER = 19  # 1: slots are filled in vLLM's pass over the batch's adapter set, which may evict one of the batch
# The LoRA kernels' grid (vLLM 0.8.5 lora_shrink / lora_expand), whose blocks of the shrink kernel grow with the max
# rank; all 0 where the profile gives the share of the LoRA costs that grows with rank as one constant:
P_RANK_EXTRA = 20  # ceil(max rank / 16) - 1: the shrink kernel's rank blocks beyond the first
P_GRID_SHRINK = 21  # shrink slices per layer
P_GRID_EXPAND = 22  # expand output tiles per layer and 64 tokens
N_PARAMS = 23

# indices into the statistics vector
S_STEPS = 0
S_PREEMPT = 1
S_LOADS = 2
S_DROPPED = 3
S_ITL_SUM = 4
S_ITL_N = 5
S_RUN_TIME = 6  # integral of running over time
S_KV_TIME = 7  # integral of used blocks over time
S_MAX_RUN = 8
S_MAX_WAIT = 9
S_MAX_BLOCKS = 10
S_MAX_SET = 11
S_MAX_RESIDENT = 12
S_END_T = 13
S_BUSY_T = 14
S_WAIT_TIME = 15
S_LOAD_MS = 16  # time spent loading adapters into GPU slots
N_STATS = 17

ITL_BINS = 400  # log-spaced histogram of inter-token gaps, 0.1 ms .. 100 s
ITL_LO = -4.0
ITL_HI = 2.0
