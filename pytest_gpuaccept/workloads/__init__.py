"""Programs the suites start as tools of their own (run as `python -m ...`, never imported by the plugin)."""
