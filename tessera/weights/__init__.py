"""`tessera weights`: how base weights and adapter files reach an AdapterPool server pod (docs/weights.md).

The digest of a directory of weights (digest.py), fetching one pinned source
into a local directory and checking it (fetch.py), and the server pod's
fetcher sidecar that does it when the operator asks, before each vLLM load
(sidecar.py). Runs in the server pod (tessera's own image), never in the
operator.
"""
