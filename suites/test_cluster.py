"""The `cluster` section: every node of a cluster through its engine (Slurm or mpirun), from the login node.

Each test is one clause of pytest_gpuaccept/clauses/cluster.py: its subjects, measurement and judge are
declared there, once; this module only gives the clauses of that section their place in the run.
"""

from pytest_gpuaccept import suite

globals().update(suite.clause_tests(__file__))  # not a test itself: the module holds only clause tests
