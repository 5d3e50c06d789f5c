"""What the cluster has: GPU types, GPU machines (nodes) and their GPUs (docs/architecture.md §Layers).

Below the market, which prices and leases them, and the agent server, which registers nodes and reports on them.
"""
