"""tessera's frontend: one Open Inference Protocol endpoint per system that runs its task graph per request.

- config: what one frontend serves (the system's graph, the plan's routing
  shares and least latencies), built from a spec and a plan;
- tensors: the request and response bodies, checked and reshaped (split, gather);
- graph: one request carried through the task graph, with its deadline and early dropping;
- server: the HTTP process (aiohttp on uvloop), its metrics and its hot reload.
"""
