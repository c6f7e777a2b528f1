"""The `allreduce` section: out-of-place busbw at the contracted size (nccl-tests, or torch if the contract says).

Each test is one clause of pytest_gpuaccept/clauses/allreduce.py: its subjects, measurement and judge are
declared there, once; this module only gives the clauses of that section their place in the run.
"""

from pytest_gpuaccept import suite

globals().update(suite.clause_tests(__file__))  # not a test itself: the module holds only clause tests
