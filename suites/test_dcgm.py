"""The `dcgm` section: NVIDIA DCGM's own diagnostic, one test per DCGM test and GPU.

Each test is one clause of pytest_gpuaccept/clauses/dcgm.py: its subjects, measurement and judge are
declared there, once; this module only gives the clauses of that section their place in the run.
"""

from pytest_gpuaccept import suite

globals().update(suite.clause_tests(__file__))  # not a test itself: the module holds only clause tests
