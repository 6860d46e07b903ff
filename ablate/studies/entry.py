"""The job entry point a run calls unless told another: the built-in trainer's
`run(config, run_dir)`, as "module:function" (ablate/studies/launch/job.py `load_entry`).

A module of its own, importing nothing: the CLI's options, the sweep, the tuner, the adaptive
stages and the launchers all default to it, and the CLI must not import the launchers (each
executor, submitit included) to learn a string.
"""

TRAINER_ENTRY = "trainer:run"
