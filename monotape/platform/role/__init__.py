"""What every process of either placement (node/ or host/) is built from.

The role kit, log rotation, process metrics, collectors, stage failures, the supervisor, the
frame grid, fan-out upkeep, endpoints and the data-dir lock.
"""
