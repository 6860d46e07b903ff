"""Planning a run before it starts, torch-free: where its processes and engines go (topology),
how much GPU memory it needs (memory), how long it takes and how many jobs (time_plan), from
the model's shape (model_shape). `ablate sweep --dry-run` and the trainer's start-up read the
same functions, so what the plan prints is what the trainer does.

    topology.py     which GPUs of every node train and which generate, the engines, who starts
                    them, the devices a job holds: one pure function of (config, job shape)
    model_shape.py  a model's layers, widths, vocabulary: its HF config, known shapes, the proxy
    split_choice.py the split of each node's GPUs under generation_gpus `auto` (the shortest
                    planned step that fits); with topology/memory/time_plan an import cycle
                    (they plan every candidate split): named in tests/test_layers.py and
                    docs/ARCHITECTURE.md with why
    engine_fit.py   whether a vLLM engine of tp GPUs holds the model: the default tp size
    placement.py    what each engine is sent, and the sentence saying where the engines run
    memory.py       GiB per training rank and per generation GPU, term by term
    time_plan.py    seconds per step and per eval, wall and GPU-hours to the budget
    time_model.py   the device constants and rates the time plan is built from
    time_jobs.py    jobs and requeues under a profile's time limit; whether an eval fits
    rates.py        a run's rates.json read back: planned vs measured, and the calibration
                    (time_model.Assume) a plan of runs not started takes from measured runs
"""
