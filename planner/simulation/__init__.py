"""Serving simulation: does a plan keep its latency SLO under bursty demand?

A discrete-event simulation of a planned deployment, laid out as a simulator
reads well (nouns, events and policies apart):

- workloads: rate traces (MMPP, diurnal with bursts, CSV replay) and the
  Poisson arrivals they drive;
- entities: the plan's replicas as flat arrays, and the task graph;
- replica_kernel: the compiled event loop of the replicas' batch queues;
- policies: load balancing, early dropping, batch latency spread;
- engine: a run, stage by stage in graph order;
- metrics: violations, drops, use, latencies against the plan;
- experiments: plan-then-simulate studies (the latency model check, static
  plans under bursty traces); plot: the PNG.
"""
