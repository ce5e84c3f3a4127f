"""Ahead-of-time compilation for TPU slices this machine does not have (libtpu's compiler).

`hardware` names chips and topologies, `programs` lowers every program of a run from its config,
`report` compiles and weighs them per chip, `compile_check` puts the three together.
"""
