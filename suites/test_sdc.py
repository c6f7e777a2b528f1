"""The `sdc` section: silent data corruption (every all_reduce iteration checked, a seeded GEMM compared bit for bit).

Each test is one clause of pytest_gpuaccept/clauses/sdc.py: its subjects, measurement and judge are declared there,
once; this module only gives the clauses of that section their place in the run.
"""

from pytest_gpuaccept import suite

globals().update(suite.clause_tests(__file__))  # not a test itself: the module holds only clause tests
