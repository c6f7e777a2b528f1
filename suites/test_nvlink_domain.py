"""`cluster.nvlink_domain`: the trays of a multi-node NVLink domain (GB200/GB300 NVL72), from the login node.

Each test is one clause of pytest_gpuaccept/clauses/nvlink_domain.py: its subjects, measurement and judge are
declared there, once; this module only gives the clauses their place in the run.
"""

from pytest_gpuaccept import suite

globals().update(suite.clause_tests(__file__))  # not a test itself: the module holds only clause tests
