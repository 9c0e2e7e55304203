"""Evaluation harnesses (LoCoMo retrieval). Datasets are read from a path the user gives;
none ship with memlane."""
