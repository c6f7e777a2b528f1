"""Cluster handover (issue 13, in progress): what is independent of the engine that runs the jobs."""
