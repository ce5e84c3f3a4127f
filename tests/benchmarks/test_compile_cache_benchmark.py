"""benchmarks/compile_cache.py reads pytest's summary line into counts."""

from benchmarks.compile_cache import outcome_counts


def test_outcome_counts_reads_each_kind_and_ignores_the_duration():
    summary = "3 failed, 1100 passed, 4 skipped, 2 warnings in 846.80s (0:14:06)"
    assert outcome_counts(summary) == {"failed": 3, "passed": 1100, "skipped": 4}


def test_outcome_counts_of_a_clean_run_has_no_failures():
    assert outcome_counts("1103 passed, 4 skipped in 846.80s") == {"passed": 1103, "skipped": 4}


def test_outcome_counts_of_errors():
    assert outcome_counts("1 error in 0.5s") == {"error": 1}
