"""Reading results: run dirs and tables into one metrics frame (gather, sources), the sigmoid
model and its fit (fit, fitters, intervals, noise, window), per-group fits and their trust
(fitgroups, trust), and what is made of them (compare, extrapolate, verdict, plan, plots,
report)."""
