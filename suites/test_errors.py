"""Error counters as health: PCIe AER around the whole run, and the RDMA ports' and the interfaces' error counters.

Each test is one clause of pytest_gpuaccept/clauses/errors.py: its subjects, measurement and judge are declared
there, once; this module only gives the clauses their place in the run (after every other: plugin.py).
"""

from pytest_gpuaccept import suite

globals().update(suite.clause_tests(__file__))  # not a test itself: the module holds only clause tests
