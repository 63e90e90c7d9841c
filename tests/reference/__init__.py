"""Independent references for the tests: slow loops written from the definitions (definitions.py)
and transcriptions of published code (one file each, citing repository, commit and file)."""
