"""The `burnin` section: hours of load on every GPU, judged as NVML's records stream.

Each test is one clause of pytest_gpuaccept/clauses/burnin.py: its subjects, measurement and judge are
declared there, once; this module only gives the clauses of that section their place in the run.
"""

from pytest_gpuaccept import suite

globals().update(suite.clause_tests(__file__))  # not a test itself: the module holds only clause tests
