"""The RL maths of a step, one registry per recipe axis, each value one small function under
the name the YAML uses: what a newcomer changes to try a new loss, advantage or filter.

    rewards.py     a sample's reward: the task's verdict, plus the length control's penalty
    filters.py     which prompt groups carry a gradient (zero-variance filtering)
    advantages.py  A = r - mean(group), normalized (`advantage.normalization`)
    losses.py      per-token policy losses (`loss.type`) and their aggregations
                   (`loss.aggregation`), token-level signatures as in verl's core_algos
    length.py      length control during generation (`length.control`)
    pool.py        the prompt pool: epochs, curricula (`data.curriculum`), NPR retirement
"""
