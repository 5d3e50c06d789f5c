"""gpumarket-agent: the daemon that runs on every GPU machine (docs/agent.md §The daemon).

It registers the machine's GPUs, runs the jobs the rounds bind to them, stops them when asked or when their
lease expires, and reports what NVML measured. No Django import: it talks to the platform over HTTP only.
"""

VERSION = "0.1.0"
