"""`cluster.utilisation`: one data-parallel training job over every GPU of every node, from the login node.

Each test is one clause of pytest_gpuaccept/clauses/cluster_utilisation.py: its subjects, measurement and judge are
declared there, once; this module only gives the clauses their place in the run.
"""

from pytest_gpuaccept import suite

globals().update(suite.clause_tests(__file__))  # not a test itself: the module holds only clause tests
