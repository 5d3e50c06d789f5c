"""`python -m gpumarket_client`: the same as the `gpumarket` command."""

from gpumarket_client.cli import main

main()
