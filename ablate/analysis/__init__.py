"""Reading results: run dirs and tables into one metrics frame (gather, sources), the sigmoid
model and its fit (sigmoid, fit, fitters, intervals, noise, window), every variant's fit and
whether it can be trusted (variant_fits, fit_trust), a run that peaked and fell (sag: the one
rule compare, extrapolate, the report, status and watch name it by), and what is made of them
(compare, extrapolate, rank_reversals: where the ranking and the predictions disagree,
budget_plan: what to scale for a budget, plots, report). Beside them: the answer's sentence
(answer, ranking_text, labels: a variant's words), why a fit is not identified
(fit_diagnosis, resolution: how small a difference the data can tell), the fitter's own
Levenberg-Marquardt (levenberg_marquardt), the paper's grid fit (paper_grid), the analysis
run end to end once for the CLI and the report (pipeline), and `ablate watch`'s parts
(watch: the judge; watch_forecast, watch_source, watch_store: watch.json, watch_plot,
watch_trackers: the band in a run's TensorBoard/MLflow)."""

# The paper's run-to-run margin on A: A's closer than this are a tie (compare, stages,
# extrapolate, every --margin). Here, not in fit.py, so that loading a study file (stagespec)
# and starting the CLI do not import numpy/scipy for one number.
A_MARGIN = 0.02
