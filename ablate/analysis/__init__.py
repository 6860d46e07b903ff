"""Reading results: run dirs and tables into one metrics frame (gather, sources), the sigmoid
model and its fit (fit, fitters, intervals, noise, window), per-group fits and their trust
(fitgroups, trust), and what is made of them (compare, extrapolate, verdict, plan, plots,
report)."""

# The paper's run-to-run margin on A: A's closer than this are a tie (compare, stages,
# extrapolate, every --margin). Here, not in fit.py, so that loading a study file (stagespec)
# and starting the CLI do not import numpy/scipy for one number.
A_MARGIN = 0.02
