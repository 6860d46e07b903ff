"""ablate: run RL recipe ablations and compare them by their fitted scaling curves (ScaleRL).

The layers, top to bottom (docs/ARCHITECTURE.md draws them):

    cli/           the `ablate` commands (__main__.py: `python -m ablate`)
    studies/       a study's side effects: load, expand, plan, submit, wait; launch/: executors
    analysis/      pure: metrics -> fits -> rankings, answers, reports
    adapters/      every trainer a study can name, the built-in one included
    readers/       other tools' logs (W&B, MLflow, TensorBoard, JSONL) as one frame
    studydir.py    the study dir's files, their one owner; study_record.py: the record of a
                   study (study.json) and its fit spec, the one set of fit defaults
    validation.py  the strict pydantic base of user files and its one-line error
    yamlio.py      YAML loading that refuses duplicate keys and keeps each key's line
    shipped.py     the recipes and profiles ablate ships; a file a study names, found by name
    errors.py      InputError: bad input, one line, exit 2
    number_text.py a number (and a count of things) as every table and sentence prints it
    value_text.py  a value as one short word: in a variant's name and on a command line
"""

__version__ = "0.1.0"
