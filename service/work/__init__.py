"""Generations and the background work around them: the runner, batching, the claim loop,
leases, the sweeper, and the tasks every process runs.
"""
