"""pytest-gpuaccept: acceptance tests that decide whether a GPU server is what the vendor sold."""

__version__ = "0.1.0"
