"""The generation service: everything that turns prompts into sampled completions for the
trainer, and pushes the trainer's new weights into whatever samples them.

    offpolicy.py    where a step's batch comes from (`off_policy.mode`): ppo_off_policy, and
                    the free-running pipeline (async_timing wall)
    pipeline_data.py  the pipeline timed by the data (async_timing data): a seed replays its run
    feeders.py      which ranks generate a step's rollouts, and how their shares are joined
    rollout.py      the configured backend's generator (`rollout.backend`: trainer/torch_axes.py);
                    "hf": a lean sampling loop over any HF causal LM
    sampler.py      the hf backend's decode loop (static KV cache)
    weights.py      how the hf generator's own copy takes pushed weights
    vllm_engine.py  the vLLM backend: one engine, token ids in and out, behaviour log-probs
    vllm_args.py    the engine's arguments (GPUs, fp32 head, dtype, memory share)
    vllm_outputs.py what an engine's outputs and config say: each token's sampling version,
                    its KV room
    replicas.py     data-parallel engines: the split of prompts, one push broadcast to all
    host.py         the engines' client in a process of its own (`rollout.vllm.client`): the
                    trainer's side, and the backend's factory
    engine_host.py  that process: the engines, their streams and pins, served over a socket
    node_host.py    node roles: a generation node's host, served over TCP to its feeding rank
    dealing.py      which engine a streamed sample goes to (most free KV room, never beyond)
    pins.py         eval engines pinned at their step's weights (pushes and rollouts leave them)
    push.py         the trainer -> generator weight push (ZeRO-3 gathers, NCCL / gloo)
    eval_service.py held-out eval beside training: the eval worker, its requests
    service.py      the one interface the loop generates through (start, push_weights, submit,
                    results as they finish, stop); CallService drives any Generator call by call
    requests.py     its Request / Result types
    batches.py      a step's Batch, groups joined in order, the pipeline's admission rule
    stream.py       StreamService: vLLM engines (one or a replica set) as a continuous stream
                    (a request per sample, thinking capped at its own budget, answer pass as
                    its thinking ends)

trainer/ never imports vLLM at module level: the "vllm" backend is registered lazily.
"""
