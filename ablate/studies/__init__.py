"""Running a study: the YAML schema and its loading (study, schema, stagespec), expansion into
variants (design, expand), planning and launching jobs (sweep, launch), their states and the one
wait loop (status), adaptive studies (adaptive, stage_rules) and recipe search (tune, pruner).
The study dir's files are ablate.studydir's; the live view of a wait is ablate.cli.live's."""
