"""The pieces a launcher assembles into a run: the policy (model + tokenizer), oracle
demonstrations, the supervised warm start, the RL stage, metrics and the final report.

`launch/local.py` (one machine, its own environments) and `launch/tpu_pod.py` (a pod, a remote
environment fleet) are thin drivers over these; each piece reads its own part of the run's
ml_collections config.
"""
