"""What a planner reads: metrics from a run's records, summaries, frontiers, the HTML report, vLLM-bench files."""
