"""The run: its loop (train.py, top to bottom) and the small parts the loop hands the run's
state to, each with its inputs in its signature.

    train.py       `run(config, run_dir)` and the loop: generate -> reward -> filter ->
                   update -> push -> eval point -> checkpoint, until the budget is spent
    state.py       TrainState: exactly what a checkpoint saves (step, counters, the window of
                   step statistics, data position, RNG, the source's state, pending evals)
    setup.py       the run's fixed parts: device, task, prompts, model, engine
    update.py      the policy update of one step (advantages -> loss -> one optimizer step)
    microbatch.py  which rows each rank trains on, in which micro-batches
    eval_point.py  the eval launched at a step and the metrics row it writes
    final_eval.py  evals on every engine of every node at the step's weights, rollouts paused
    checkpoint.py  checkpoint, resume, preemption stops (collective on every rank)
    accounting.py  compute counters and the budget they are spent against
    rates.py       rates.json: what the run's time plan assumed and what its steps measured
"""
