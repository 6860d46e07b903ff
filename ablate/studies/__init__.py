"""Running a study: the YAML schema and its loading (study, stagespec), expansion into
variants (expand), the results folder (store), launching jobs (launch, sweep), watching them
(status, progress), staged studies (stages) and recipe search (tune, pruner)."""
