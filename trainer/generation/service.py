"""The generation service: the one interface the loop generates through.

    start()                         bring the backend up (threads; an engine is already up)
    push_weights(weights, version)  the trainer's weights at `version` (a module or a state
                                    dict), for work submitted after it
    submit(request)                 prompts x n samples with the run's length control
    results(timeout)                finished requests, as they finish (not in submit order)
    stop()                          end the work in flight and the threads

Two backends sit behind it:
- `CallService` drives any Generator (trainer/generation/rollout.py: hf) one generate call
  per request, in submit order, weight pushes ordered with the requests (a push applies to the
  requests submitted after it, never to one in flight): the hf path, whose results stay
  reproducible call for call.
- `StreamService` (trainer/generation/stream.py) keeps vLLM engines full, one engine or every
  replica of a set: every sample is its own engine request, dealt to the engine with the most
  free KV room as soon as one can hold it, its thinking pass capped at its own drawn budget,
  its answer pass added the moment its thinking ends; a request's result is ready when its
  last sample is, whatever else the engines are decoding.

A stop signal (trainer/dist/preempt.py) ends the work in flight: its result carries
preempt.Stopped as its error, and the caller redoes it on resume.
"""

from __future__ import annotations

import queue
import threading
from typing import Iterator, Optional, Protocol, Union

import torch

from trainer.dist import preempt
from trainer.config import TrainConfig
from trainer.generation.requests import Request, Result, Weights, finished, version_range
from trainer.rollouts import Generator
from trainer.algo.length import generate_rollout

__all__ = ["GenerationService", "CallService", "Request", "Result", "Weights", "make_service"]


class GenerationService(Protocol):
    def start(self) -> None: ...

    def push_weights(self, weights: Weights, version: int) -> None: ...

    def submit(self, request: Request) -> None: ...

    def results(self, timeout: Optional[float] = None) -> Iterator[Result]: ...

    def stop(self) -> None: ...


def load_state(gen: Generator, state: dict, version: int) -> None:
    """A state-dict snapshot into a generator holding its own model copy (hf own_copy): the
    same load, sampler refresh and version stamp as HFGenerator's in-flight pushes."""
    model = getattr(gen, "model", None)
    if model is None or not hasattr(gen, "sampler"):
        raise TypeError(f"{type(gen).__name__} takes pushes from a module, not a state dict")
    model.load_state_dict(state)
    gen.sampler.refresh()
    gen.version = version


class _Push:
    def __init__(self, weights: Weights, version: int) -> None:
        self.weights, self.version = weights, version


class CallService:
    """Any Generator behind the service interface: one worker thread takes submitted requests
    and pushes in order, one generate call (with length control) per request."""

    def __init__(self, gen: Generator, config: TrainConfig, tokenizer,
                 name: str = "ablate-service") -> None:
        self.gen, self.config, self.tok, self.name = gen, config, tokenizer, name
        self.todo: "queue.Queue[Union[Request, _Push, None]]" = queue.Queue()
        self.done: "queue.Queue[Result]" = queue.Queue()
        self.thread: Optional[threading.Thread] = None

    def start(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._work, name=self.name, daemon=True)
            self.thread.start()

    def push_weights(self, weights: Weights, version: int) -> None:
        """Applied after the requests submitted so far and before the later ones. A module
        is snapshotted by the generator when the worker reaches the push (hf: its state
        dict), so pass a state dict when the module moves on meanwhile."""
        self.todo.put(_Push(weights, version))

    def submit(self, request: Request) -> None:
        self.todo.put(request)

    def results(self, timeout: Optional[float] = None) -> Iterator[Result]:
        """Finished requests as they finish; ends when none finishes within `timeout` s."""
        return finished(self.done, timeout)

    def stop(self, timeout_s: float = 60.0) -> None:
        self.todo.put(None)
        if self.thread is not None:
            self.thread.join(timeout=timeout_s)

    def _work(self) -> None:
        while (item := self.todo.get()) is not None:
            if isinstance(item, _Push):
                if isinstance(item.weights, dict):
                    load_state(self.gen, item.weights, item.version)
                else:
                    self.gen.sync_weights(item.weights, item.version)
                continue
            try:
                preempt.check()
                with torch.no_grad():
                    ro = generate_rollout(self.gen, item.prompts, self.config, self.tok,
                                          item.seed, n=item.n, temperature=item.temperature)
                self.done.put(Result(item.tag, ro, versions=version_range(ro)))
            except BaseException as e:  # noqa: BLE001 - handed to the caller with its request
                self.done.put(Result(item.tag, error=e))
                if isinstance(e, preempt.Stopped):
                    return  # nothing more runs after a stop signal


def make_service(gen: Generator, config: TrainConfig, tokenizer,
                 name: str = "ablate-service") -> GenerationService:
    """The service over `gen`: vLLM engines (one, or replicas) stream (StreamService);
    everything else goes call by call."""
    from trainer.generation.stream import stream_service

    svc = stream_service(gen, config, tokenizer) or CallService(gen, config, tokenizer, name)
    svc.start()
    return svc
