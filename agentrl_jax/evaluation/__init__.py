"""Evaluations of a policy on published agent benchmarks, graded by the benchmarks' own checkers.

  agentbench   the AgentBench-FC tasks through any AgentRL-compatible controller: k passes,
               success/score mean ± std per task, how episodes ended (the paper's Table 7)
  bfcl         Berkeley Function Calling Leaderboard v3 (`bfcl-eval==2025.6.8`, extra `[bfcl]`):
               bfcl_data loads categories and renders tools, bfcl_grade wraps BFCL's AST and
               multi-turn checkers, bfcl_score aggregates as the leaderboard does, bfcl runs
               a policy over the samples and writes the report.

Submodules are imported on demand: each benchmark has its own optional dependencies.
"""
