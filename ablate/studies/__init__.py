"""Running a study: the YAML schema and its loading (study, schema, stagespec), expansion into
variants (design, expand), planning and launching jobs (sweep, launch), their states and the one
wait loop (status), adaptive studies (adaptive, stage_rules) and recipe search (tune, pruner,
tune_ranking: finished trials ranked on one fit window). Around them: `--override` of the
study's own keys (study_overrides), its `fit:` columns checked against what its trainer logs
(fitcheck), planned vs measured rates and the runs not started re-planned from them
(measured), the runs at once and the study's wall time (capacity), a GPU recipe refused where
its jobs get no GPUs (gpu_need), `sweep --within` (sizing searches, proposal writes), and
`ablate init`'s starter study (starter), the job entry point runs call unless told another
(entry). The study dir's files are ablate.studydir's; the live
view of a wait is ablate.cli.live's."""
