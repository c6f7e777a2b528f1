"""The `compute` section: dense GEMM TFLOPS per GPU, every GPU at once.

Each test is one clause of pytest_gpuaccept/clauses/compute.py: its subjects, measurement and judge are
declared there, once; this module only gives the clauses of that section their place in the run.
"""

from pytest_gpuaccept import suite

globals().update(suite.clause_tests(__file__))  # not a test itself: the module holds only clause tests
