"""Tests of the scripts under tools/ that write the bundled tables."""
