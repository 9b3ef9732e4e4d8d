"""What every tier shares: the installed scripts and how a run of one reads, free loopback ports, tier timings.

Stdlib, pytest and the simulator only, so any tier (and the real components' harnesses) may import it.
"""
