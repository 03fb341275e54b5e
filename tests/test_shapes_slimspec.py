"""The draft-shape choice (`shapes_slimspec`): expected tokens per round from per-depth acceptance, round costs from
measured curves, and the shape each kind of machine gets."""

import math
import random

import pytest

from slimspec_hf.acceptance_slimspec import DepthAcceptance, tokens_by_size
from slimspec_hf.costs_slimspec import PRIOR_MOST, PRIOR_ROUNDS, CostLog, RoundCosts, ShapeRatios
from slimspec_hf.shapes_slimspec import (
    EXPLORE_AFTER,
    PLAIN_EVERY,
    SWITCH_MARGIN,
    TIMED_ROUNDS,
    DraftShape,
    LookupRate,
    RoundTimer,
    ShapeTuner,
    candidate_shapes,
    choose_shape,
    expected_tokens,
    round_time,
)

from .testing_utils import make_tiny_drafter, make_tiny_target


def observed(rank_probabilities, depths=8, rounds=10_000, max_rank=8):
    """A `DepthAcceptance` that has seen `rounds` rounds at every depth with these rank probabilities."""
    acceptance = DepthAcceptance(max_rank=max_rank, max_depth=depths, prior_weight=0.0)
    for j in range(depths):
        probabilities = (
            rank_probabilities[j] if isinstance(rank_probabilities[0], (list, tuple)) else rank_probabilities
        )
        for m, p in enumerate(probabilities, start=1):
            acceptance.counts[j][m - 1] = p * rounds
        acceptance.counts[j][max_rank] = (1 - sum(probabilities)) * rounds
    return acceptance


def test_a_chain_yields_the_products_of_its_depths_acceptance():
    acceptance = observed([[0.8], [0.6], [0.5], [0.4]], depths=4)
    assert expected_tokens(DraftShape(3, 3, 1), acceptance) == pytest.approx(1 + 0.8 + 0.8 * 0.6 + 0.8 * 0.6 * 0.5)
    assert expected_tokens(DraftShape(), acceptance) == 1.0


def test_a_tree_spends_its_nodes_where_they_add_most():
    acceptance = observed([0.5, 0.2, 0.1, 0.05, 0.05, 0.0, 0.0, 0.0])
    # one level of four children: the target's token among the drafter's four likeliest
    assert expected_tokens(DraftShape(4, 1, 4), acceptance) == pytest.approx(1 + 0.85)
    # two levels, three nodes: the second depth's first child adds 0.7·0.5 > the first depth's third child's 0.1
    assert expected_tokens(DraftShape(3, 2, 4), acceptance) == pytest.approx(1 + 0.7 + 0.7 * 0.5)
    wider = [expected_tokens(DraftShape(size, 4, 4), acceptance) for size in (4, 8, 16)]
    assert wider == sorted(wider) and wider[0] < wider[-1]


def test_acceptance_counts_outweigh_the_prior_and_grow_with_the_rank():
    acceptance = DepthAcceptance(max_rank=4, max_depth=2)
    for _ in range(1000):
        acceptance.add(1, 1)
        acceptance.add(2, None)
    acceptance.add(9, 1)  # past max_depth: not kept
    assert acceptance.coverage(1, 1) > 0.99 and acceptance.coverage(2, 4) < 0.01
    assert acceptance.observed(1) == 1000
    fresh = DepthAcceptance(max_rank=4, max_depth=2)
    values = [fresh.coverage(1, m) for m in range(5)]
    assert values == sorted(values) and values[0] == 0.0 and values[-1] < 1.0
    assert DepthAcceptance.from_dict(acceptance.as_dict()).counts == acceptance.counts


def test_a_drafter_starts_from_the_acceptance_its_generation_config_stores():
    """`draft_acceptance` (what `slimspec bench --save-acceptance` writes): the first auto call of a process starts
    from it, scaled to at most `STORED_ROUNDS` rounds per depth so that the call's own rounds soon outweigh it; a
    drafter without it starts from the prior; a malformed one is refused in one line naming it."""
    from slimspec_hf import acceptance_slimspec

    target = make_tiny_target()
    drafter = make_tiny_drafter(target)
    stored = {"max_rank": 2, "counts": [[900.0, 50.0, 50.0], [10.0, 0.0, 30.0]]}
    drafter.generation_config.draft_acceptance = {"greedy": stored}
    greedy, sampled = (
        acceptance_slimspec.depth_acceptance(drafter, False),
        acceptance_slimspec.depth_acceptance(drafter, True),
    )
    assert greedy.observed(1) == pytest.approx(acceptance_slimspec.STORED_ROUNDS) and greedy.observed(2) == 40.0
    assert greedy.counts[0][0] / greedy.observed(1) == pytest.approx(0.9)  # the stored shape, less weight
    assert sampled.draws and sampled.observed(1) == 0  # no sampled measurement stored: the prior
    assert acceptance_slimspec.measured_acceptance(drafter) == {"greedy": greedy.as_dict()}
    other = make_tiny_drafter(target)
    other.generation_config.draft_acceptance = {"sampled": {"max_rank": 2, "counts": [[1.0, 2.0]]}}
    with pytest.raises(ValueError, match=r"^`draft_acceptance`: expected .*slimspec bench --save-acceptance"):
        acceptance_slimspec.depth_acceptance(other, True)


def test_a_measured_curve_pools_a_slow_round_instead_of_raising_every_wider_width():
    """Widths measured once each: one slow round at width 2 is pooled with the cheaper width 3 (the curve never
    decreases), and widths past it keep their own medians; a drafter's first step over many positions (after plain
    rounds) sits at its own width, not at width 1."""
    log = CostLog(batch_size=4)
    for width, seconds in ((1, 0.110), (2, 0.177), (3, 0.133), (4, 0.160), (11, 0.284)):
        log.add_verify(width, seconds)
    curve = CostLog.curve(log.verify)
    assert curve[1] == curve[2] == pytest.approx(0.155) and curve[3] == pytest.approx(0.160)
    assert list(curve) == sorted(curve) and curve[10] == pytest.approx(0.284) and curve[0] == pytest.approx(0.110)
    log.add_draft(88, 0.068)
    log.add_draft(2, 0.013)
    assert CostLog.curve(log.draft)[0] == pytest.approx(0.013)  # below the cheapest measured width: its value


def test_a_round_times_the_drafters_first_step_at_the_width_it_read():
    """`RoundTimer`: the drafter's first step (over the tokens accepted since it last ran) is logged at that width,
    each further level at `top_k` nodes, verification at the round's width."""
    from types import SimpleNamespace

    from slimspec_hf.shapes_slimspec import RoundTimer

    tuner = ShapeTuner(CostLog(batch_size=1), DepthAcceptance(), start=DraftShape(6, 3, 2))
    tuner.probes.clear()
    tuner.log.add_verify(1, 0.1)
    tuner.log.add_draft(1, 0.01)
    tuner.next_shape = lambda rows=None, slots=None: DraftShape(6, 3, 2)
    timer = RoundTimer(tuner, "cpu", tree_shape=lambda *shape: shape)
    clock = iter([0.0, 0.30, 0.34, 0.50])  # start, first step done (40 positions), levels done, verified
    timer.now = lambda: next(clock)
    timer.start(0.0)
    timer.mark_committed(40)
    timer.mark_drafted()
    tree = SimpleNamespace(source="drafter", kept=list(range(6)), grafted_from=None)
    timer.end([tree], [SimpleNamespace(path=[0])], tokens=2)
    assert tuner.log.draft[40] == [pytest.approx(0.30)] and tuner.log.draft[2] == [pytest.approx(0.02)] * 2
    assert tuner.log.verify[7] == [pytest.approx(0.16)]


def test_rounds_after_rows_finished_are_timed_at_their_own_row_count():
    """At B = 4, a round with 2 rows left verifies fewer rows and costs less: its times go to the 2-row curves, not
    the batch's (nor into the call's measured speed-up); its acceptance counts as any round's."""
    from types import SimpleNamespace

    from slimspec_hf.shapes_slimspec import RoundTimer

    tuner = ShapeTuner(CostLog(batch_size=4), DepthAcceptance(), start=DraftShape(1, 1, 1))
    tuner.probes.clear()
    tuner.next_shape = lambda rows=None, slots=None: DraftShape(1, 1, 1)
    timer = RoundTimer(tuner, "cpu", tree_shape=lambda *shape: shape)
    tree = SimpleNamespace(source="drafter", kept=[0], grafted_from=None)
    for rows, seconds in ((4, 0.20), (2, 0.08)):
        timer.now = iter([0.0, 0.01, 0.01, seconds]).__next__
        timer.start(0.0)
        timer.mark_committed(1)
        timer.mark_drafted()
        timer.end([tree] * rows, [SimpleNamespace(path=[0])] * rows, tokens=2 * rows)
    assert tuner.log.verify == {2: [pytest.approx(0.19)]} and tuner.log.draft == {1: [pytest.approx(0.01)]}
    left = tuner.log_for(2, left_of=4)  # kept apart from calls of 2 prompts, whose rounds run otherwise
    assert left.verify == {2: [pytest.approx(0.07)]} and left.draft == {1: [0.01]} and not tuner.log_for(2).verify
    assert timer.tokens == 8 and timer.seconds == pytest.approx(0.20) and tuner.accepted == 2.0


def test_a_widths_kept_rounds_come_from_several_calls_and_points_of_each():
    """One call's rounds of a width go to the costs at its first two and then at the 16th, 32nd, 64th ...: a long
    call of one shape does not fill the 9 kept rounds alone (a slow stretch of one call had priced every shape)."""
    log = CostLog(batch_size=4)
    tuner = ShapeTuner(log, DepthAcceptance(), start=DraftShape(3, 1, 3))
    tuner.probes.clear()
    for n in range(70):  # one call: 70 rounds of tree 3/1/3 (width 4), round n taking 0.1 + n ms
        tuner.observe(DraftShape(3, 1, 3), 0.1 + n / 1000, [(1, 0.01)], accepted=1.0)
    tuner.observe(DraftShape(), 0.05, [], accepted=None)  # a plain round: its width's first
    assert log.verify[4] == pytest.approx([0.1, 0.101, 0.116, 0.132, 0.164]) and log.verify[1] == [0.05]
    again = ShapeTuner(log, DepthAcceptance(), start=DraftShape(3, 1, 3))  # the next call
    for _ in range(10):
        again.observe(DraftShape(3, 1, 3), 0.2, [(1, 0.01)], accepted=1.0)
    assert log.verify[4] == pytest.approx([0.1, 0.101, 0.116, 0.132, 0.164, 0.2, 0.2])


def test_the_rows_left_of_a_batch_are_shaped_by_the_costs_at_their_row_count(monkeypatch):
    """A batch of 8 whose every verified token costs as much as the first decodes plain; once 6 of its rows have
    finished, the 2 left verify about as a batch of 4 does (a plain round between the 1- and 4-row ones measured, a
    wider one adding the work of its extra tokens: what the batch sizes around added, scaled to 2 rows), and drafting
    pays for them; the next call's rows left start from that choice. Where 2-row rounds were timed, their cost
    counts."""
    from slimspec_hf import shapes_slimspec
    from slimspec_hf.costs_slimspec import costs_at_rows

    acceptance = observed([0.6, 0.12, 0.06, 0.04, 0.03, 0.02, 0.01, 0.01])
    logs = {rows: CostLog(batch_size=rows) for rows in range(1, 9)}
    for n in range(1, 17):
        logs[1].add_verify(n, 0.040)  # flat at one row
        logs[4].add_verify(n, 0.050 + 0.005 * n)  # gentle at four
        logs[8].add_verify(n, 0.080 * n)  # steep at eight
    for rows in (1, 4, 8):
        for w in range(1, 9 if rows > 1 else 2):  # one row measured the drafter's one-node step only
            logs[rows].add_draft(w, 0.001 * rows)
    logs[8].add_verify(1, 0.080)  # two plain rounds timed: the batch's choice is made
    costs = costs_at_rows(2, list(logs.values()))
    plain = 0.040 + (0.055 - 0.040) / 3
    assert costs.batch_size == 2 and costs.verify_time(1) == pytest.approx(plain)
    added = (1 / 3) * (2 / 4) * (0.075 - 0.055)  # 4 rows' addition at width 5, for 2 rows; one row added nothing
    assert costs.verify_time(5) == pytest.approx(plain + added) and costs.draft_time(3) == pytest.approx(0.002)
    assert len(costs.draft) == 8  # the drafter's steps as wide as either side measured them

    left = CostLog(batch_size=2)  # the 2 rows left of a batch of 8

    def log_for(rows, left_of=0):
        return left if left_of else logs[rows]

    tuner = ShapeTuner(logs[8], acceptance, start=DraftShape(4, 1, 4), log_for=log_for)
    tuner.probes.clear()
    assert tuner.next_shape(8).is_plain and tuner.choice.shape.is_plain
    shape = tuner.next_shape(2)
    assert not shape.is_plain and left.choice.speedup > 1.1, left.choice
    assert tuner.next_shape(8).is_plain  # the whole batch's choice stands
    again = ShapeTuner(logs[8], acceptance, start=DraftShape(4, 1, 4), log_for=log_for)  # the next call
    again.probes.clear()
    again.next_shape(8)  # the batch's own choice
    chosen = []
    monkeypatch.setattr(shapes_slimspec, "choose_shape", lambda *a, **k: chosen.append(a) or left.choice)
    assert [again.next_shape(2) for _ in range(again.every - 1)] == [shape] * (again.every - 1) and not chosen
    again.next_shape(2)  # `every` rounds over 2 rows left since their last choice: chosen again
    assert len(chosen) == 1
    monkeypatch.undo()

    left.add_verify(shape.size + 1, 1.0)  # timed over the 2 rows left: a second per round, whatever the curves say
    timed = costs_at_rows(2, list(logs.values()), left)
    assert timed.verify_time(shape.size + 1) > 2 * costs.verify_time(shape.size + 1)
    assert timed.verify_time(1) > 2 * costs.verify_time(1)  # the curve scaled to the level its own rounds ran at


def test_a_new_batch_size_prices_its_rounds_from_a_smaller_ones_costs_without_probing():
    """One row measured its curve (nearly flat: the weights are read whatever the width). A first call of 4 rows
    times its plain rounds and then chooses at once, from one row's curve brought to 4 rows (what a wider round adds,
    times 4) at the level of its own plain rounds: no probe."""
    logs = {rows: CostLog(batch_size=rows) for rows in range(1, 5)}
    for n in range(1, 17):
        logs[1].add_verify(n, 0.040 + 0.001 * (n - 1))
    for w in range(1, 9):
        logs[1].add_draft(w, 0.002)
    acceptance = observed([0.6, 0.12, 0.06, 0.04, 0.03, 0.02, 0.01, 0.01])
    tuner = ShapeTuner(logs[4], acceptance, start=DraftShape(4, 1, 4), log_for=lambda rows, left_of=0: logs[rows])
    assert tuner.estimated and not tuner.probes
    for _ in range(TIMED_ROUNDS):
        shape = tuner.next_shape()
        assert shape.is_plain
        tuner.observe(shape, 0.060, [], None, yielded=1.0)
    costs = tuner.costs()
    assert costs.verify_time(1) == pytest.approx(0.060) and costs.verify_time(9) == pytest.approx(0.060 + 4 * 0.008)
    shape = tuner.next_shape()
    assert not shape.is_plain and not tuner.probing, shape


def test_a_flat_verification_curve_picks_a_large_tree():
    # GPU-like: verifying 64 tokens costs what one does; the drafter's step is a tenth of it
    costs = RoundCosts(batch_size=1, verify=tuple([0.010] * 64), draft=tuple([0.001] * 8))
    acceptance = observed([0.6, 0.12, 0.06, 0.04, 0.03, 0.02, 0.01, 0.01])
    choice = choose_shape(candidate_shapes(max_size=63), costs, acceptance)
    assert not choice.shape.is_chain and choice.shape.size >= 16 and choice.shape.depth >= 4, choice.shape
    assert choice.speedup > 2


def test_a_steep_verification_curve_picks_plain_decoding():
    # fp32 without native bf16: every verified token costs as much as the first
    costs = RoundCosts(batch_size=1, verify=tuple(0.050 * n for n in range(1, 17)), draft=tuple([0.005] * 8))
    acceptance = observed([0.6, 0.12, 0.06, 0.04, 0.03, 0.02, 0.01, 0.01])
    choice = choose_shape(candidate_shapes(max_size=15), costs, acceptance)
    assert choice.shape.is_plain and choice.speedup == 1.0


@pytest.mark.parametrize("seed", range(8))
def test_the_trees_a_choice_skips_are_never_the_fastest(seed, monkeypatch):
    """A tree that yields no more tokens than the same size one level shallower or with half the children per node
    costs no less, so a choice skips pricing it (`dominated`): it chooses what pricing every shape chooses."""
    from slimspec_hf import shapes_slimspec

    rng = random.Random(seed)
    first, ratio = [rng.uniform(0.3, 0.8) for _ in range(8)], [rng.uniform(0.05, 0.6) for _ in range(8)]
    ranks = [[f * (1 - r) * r**m for m in range(8)] for f, r in zip(first, ratio)]  # rank 1 likeliest, then fewer
    per_token = rng.choice([0.0002, 0.002, 0.006])
    costs = RoundCosts(
        batch_size=rng.choice([1, 4]),
        verify=tuple(0.030 + per_token * n for n in range(1, 65)),
        draft=tuple(0.003 + 0.0002 * w for w in range(1, 9)),
    )
    acceptance, candidates = observed(ranks), candidate_shapes(63)
    pruned = choose_shape(candidates, costs, acceptance)
    assert len(pruned.predictions) < len(candidates) / 1.2  # shapes were skipped
    monkeypatch.setattr(shapes_slimspec, "dominated", lambda shape, tables: False)
    every = choose_shape(candidates, costs, acceptance)
    assert pruned.shape == every.shape and pruned.tokens_per_second == every.tokens_per_second
    assert all(every.predictions[name] == speed for name, speed in pruned.predictions.items())


def test_a_shape_whose_rounds_run_dearer_than_priced_gives_way():
    """`CostLog.speed`: each shape's measured over predicted round seconds (the lower medians and the
    interpolated curves price some shapes a few percent off), from the ratio over every shape's rounds as a prior; the
    tuner times its rounds against their prices (not a round whose drafter caught up on a round without it), and its
    choices read the factors."""
    log = CostLog(batch_size=4)
    assert log.speed.factor("plain") == 1.0
    for _ in range(40):
        log.speed.add("tree 6/2/4", 0.1065, 0.100)
        log.speed.add("tree 3/1/4", 0.0853, 0.085)
    assert log.speed.factor("tree 6/2/4") > 1.05 and log.speed.factor("tree 3/1/4") < 1.01
    assert 1.0 < log.speed.factor("chain 2") < log.speed.factor("tree 6/2/4")  # never timed: the pooled ratio
    recent = CostLog(batch_size=4)
    for ratio in [1.0] * 200 + [1.3] * 64:  # the machine got slower for this shape (say, longer caches)
        recent.speed.add("tree 4/1/4", 0.1 * ratio, 0.1)
    assert recent.speed.factor("tree 4/1/4") > 1.15  # its recent rounds weigh most (1.07 over all of them)

    def verify(n):
        return 0.020 + 0.001 * n

    tuner, used = simulate(verify=verify, draft=lambda w: 0.002, ranks=RANKS)
    chosen = tuner.shape
    assert not chosen.is_plain and str(chosen) in tuner.log.speed.sums
    measured, predicted, _ = tuner.log.speed.sums[str(chosen)]
    assert measured / predicted == pytest.approx(1.0, abs=0.15)  # this machine runs as priced
    for _ in range(100):  # from now on the chosen shape's rounds run 30% dearer than priced
        tuner.log.speed.add(str(chosen), 1.3 * predicted, predicted)
    for _ in range(tuner.every):
        shape = tuner.next_shape()
        tuner.observe(shape, verify(shape.size + 1), [], None)
    assert tuner.shape != chosen and tuner.choice.predictions[str(chosen)] < tuner.choice.tokens_per_second
    shape = tuner.shape
    assert not shape.is_plain
    before = list(tuner.log.speed.sums.get(str(shape), ()))
    tuner.observe(DraftShape(), verify(1), [], None)  # a plain round: the drafter falls a round behind
    tuner.observe(shape, verify(shape.size + 1), [(12, 0.050)], None)  # its first step reads both rounds' tokens
    assert list(tuner.log.speed.sums.get(str(shape), ())) == before  # no shape's price holds that: not timed
    tuner.observe(shape, verify(shape.size + 1), [(2, 0.002)], None)
    assert list(tuner.log.speed.sums[str(shape)]) != before


def test_a_shapes_own_ratio_counts_as_far_as_its_rounds_noise_lets_it():
    """`ShapeRatios.prior`: two shapes whose rounds gave 0.8 and 1.2 of their prediction. Where every round gave
    exactly that, a prior of `PRIOR_ROUNDS` rounds: each shape's factor is close to its own ratio. Where the rounds
    scattered by 0.8 of a prediction each (a round's tokens scatter by 1.5-2 times their mean on real text), the
    prior is worth σ² / 0.1² = 64 rounds, the same if the counts were halved on the way, and the factors stay nearer
    every shape's: 64 such rounds tell 0.8 from 1.2 only loosely. Few rounds tell no noise; much noise, at most
    `PRIOR_MOST`."""

    def ratios(rounds, scatter, kept=512):
        log = ShapeRatios(rounds_kept=kept)
        for i in range(rounds):
            sign = 1 if i % 2 else -1
            log.add("tree 4/1/4", 0.8 + sign * scatter, 1.0)
            log.add("tree 10/3/4", 1.2 + sign * scatter, 1.0)
        return log

    exact, noisy = ratios(64, 0.0), ratios(64, 0.8)
    assert exact.prior() == PRIOR_ROUNDS and noisy.prior() == pytest.approx(64, rel=0.05)
    assert exact.relative("tree 4/1/4") < 0.83 and exact.relative("tree 10/3/4") > 1.17
    assert 0.88 < noisy.relative("tree 4/1/4") < 0.92 and 1.08 < noisy.relative("tree 10/3/4") < 1.12
    assert ratios(200, 0.8, kept=16).prior() == pytest.approx(64, rel=0.1)  # halved counts, the same spread
    assert ratios(4, 0.8).prior() == PRIOR_ROUNDS  # 6 degrees of freedom tell no spread
    assert ratios(64, 5.0).prior() == PRIOR_MOST


def test_a_shape_whose_rounds_yield_fewer_tokens_than_predicted_gives_way():
    """`CostLog.yields`: each shape's tokens gained beyond the target's own against those predicted (what the
    acceptance model misses for one shape: at 4 rows, greedy, with lookup, tree 2/1/2 gained 0.89 of its prediction
    and 4/1/4 1.16), from every shape's ratio as a prior; the tuner counts the rounds of its choices (not a probe's),
    and its choices read the factors relative to every shape's (the call's calibration holds what they share)."""

    def verify(n):
        return 0.020 + 0.001 * n

    tuner, used = simulate(verify=verify, draft=lambda w: 0.002, ranks=RANKS)
    chosen, name = tuner.shape, str(tuner.shape)
    assert not chosen.is_plain and name in tuner.log.yields.sums
    measured, predicted, count = tuner.log.yields.sums[name]
    assert measured / predicted == pytest.approx(1.0, abs=0.2)  # the model holds for this simulated drafter
    for _ in range(100):  # from now on the chosen shape's rounds gain 40% of the tokens predicted
        tuner.log.yields.add(name, 0.4 * predicted / count, predicted / count)
    assert tuner.log.yields.factor(name) < 0.6 and tuner.log.yields.factor("plain") > 0.6  # its own, not the pool's
    assert tuner.log.yields.relative("chain 3") == pytest.approx(1.0)  # a shape never run: as every shape's
    for _ in range(tuner.every):
        shape = tuner.next_shape()
        tuner.observe(shape, verify(shape.size + 1), [], None)
    assert tuner.shape != chosen and tuner.choice.predictions[name] < tuner.choice.tokens_per_second
    shape = tuner.shape
    before = list(tuner.log.yields.sums.get(str(shape), ()))
    tuner.probing = True  # a probe's round measures a width, not what the choice predicted
    tuner.observe(shape, verify(shape.size + 1), [(2, 0.002)], None, yielded=9.0)
    tuner.probing = False
    assert list(tuner.log.yields.sums.get(str(shape), ())) == before
    tuner.observe(shape, verify(shape.size + 1), [(2, 0.002)], None, yielded=9.0)
    assert tuner.log.yields.sums[str(shape)][0] > (before or [0.0])[0]


def test_a_shape_gives_way_only_to_one_predicted_faster_by_more_than_the_prices_own_error():
    """A choice keeps the current drafting shape unless another is predicted `SWITCH_MARGIN` faster (the best few
    shapes are priced within 1-2% of each other, their measured speeds differ more), and over several rows drafts
    only where that beats plain decoding by as much; the call starts from the settings' own shape, priced among the
    candidates though no candidate list holds it (top-k 3)."""
    acceptance = observed([0.6, 0.12, 0.06, 0.04, 0.03, 0.02, 0.01, 0.01])
    costs = RoundCosts(batch_size=4, verify=tuple(0.050 + 0.004 * n for n in range(1, 17)), draft=(0.004,) * 8)
    candidates = candidate_shapes(max_size=15)
    free = choose_shape(candidates, costs, acceptance)
    ranked = sorted((p, name) for name, p in free.predictions.items() if name != "plain")
    best = ranked[-1][0]
    close = next(s for s in candidates if ranked[-2][1] == str(s))  # the runner-up
    far = next(s for s in candidates if str(s) == next(n for p, n in ranked if p < best / (1 + SWITCH_MARGIN)))
    assert best / free.predictions[str(close)] - 1 < SWITCH_MARGIN
    assert choose_shape(candidates, costs, acceptance, current=close).shape == close
    assert choose_shape(candidates, costs, acceptance, current=far).shape == free.shape
    slower = best / free.predictions["plain"] / 1.02  # every drafting shape's rounds priced so, the best is 2% ahead

    def speed(name):
        return 1.0 if name == "plain" else slower

    from_plain = choose_shape(candidates, costs, acceptance, speed=speed, current=DraftShape())
    assert from_plain.shape.is_plain  # over several rows drafting must beat plain decoding by `SWITCH_MARGIN` too
    one_row = RoundCosts(batch_size=1, verify=costs.verify, draft=costs.draft)
    from_plain_one_row = choose_shape(candidates, one_row, acceptance, speed=speed, current=DraftShape())
    assert from_plain_one_row.shape == free.shape  # one row: `margin` only

    start = DraftShape(3, 1, 3, lookup=False)
    tuner = ShapeTuner(CostLog(batch_size=4), acceptance, start=start)
    tuner.probes.clear()
    for n in (1, *range(1, 17)):  # two plain rounds timed, then every width
        tuner.log.add_verify(n, costs.verify_time(n))
    for w in range(1, 9):
        tuner.log.add_draft(w, 0.004)
    tuner.next_shape()
    assert str(start) in tuner.choice.predictions and start not in candidate_shapes(max_size=15)


def test_a_batch_whose_verification_grows_with_rows_decodes_plain_sooner():
    acceptance = observed([0.6, 0.12, 0.06, 0.04, 0.03, 0.02, 0.01, 0.01])

    def costs(rows):  # a shared weight read plus a per-token cost for every row's tokens
        return RoundCosts(
            batch_size=rows,
            verify=tuple(0.040 + 0.004 * rows * n for n in range(1, 17)),
            draft=tuple(0.002 + 0.0005 * rows * w for w in range(1, 9)),
        )

    chosen = {rows: choose_shape(candidate_shapes(max_size=15), costs(rows), acceptance) for rows in (1, 4, 32)}
    assert not chosen[1].shape.is_plain
    assert chosen[32].shape.is_plain
    assert chosen[1].shape.size >= chosen[4].shape.size  # fewer nodes per row as rows share the cost


def test_lookup_is_chosen_where_its_drafts_pay_for_the_width_they_add_to_every_row():
    """One prompt verifies lookup's 10-token drafts nearly free; in a batch whose verification grows with rows, one
    row's match widens every row: the same drafts no longer pay at 4 rows, shorter ones (the batched settings') do."""
    acceptance = observed([0.6, 0.12, 0.06, 0.04, 0.03, 0.02, 0.01, 0.01])

    def costs(rows):
        return RoundCosts(
            batch_size=rows,
            verify=tuple(0.040 + 0.004 * rows * n for n in range(1, 17)),
            draft=tuple(0.002 + 0.0005 * rows * w for w in range(1, 9)),
        )

    def choice(rows, draft_tokens):  # lookup alone in 30% of rows' rounds, yielding 4 tokens; its grafts add nothing
        rate = LookupRate(rounds=100, alone=30, tokens=30 * 4.0, width=30 * (draft_tokens + 1.0), drafted=1000)
        return choose_shape(candidate_shapes(max_size=15, lookup=True), costs(rows), acceptance, lookup=rate)

    without = choose_shape(candidate_shapes(max_size=15), costs(1), acceptance)
    assert choice(1, 10).shape.lookup and choice(1, 10).speedup > 1.1 * without.speedup
    assert not choice(4, 10).shape.lookup and not choice(4, 10).shape.is_plain
    assert choice(4, 3).shape.lookup and not choice(8, 3).shape.lookup  # at 8 rows most rounds have a match
    assert not choice(32, 3).shape.lookup and choice(32, 3).shape.is_plain
    # lookup never drafting alone (sampling's settings): its grafts, not measured yet, start from an optimistic prior
    # so that a shape with lookup is drafted (and measured) before it can be ruled out; measured to add nothing, not
    shapes = candidate_shapes(max_size=15, lookup=True)
    for rows in (1, 4):
        assert choose_shape(shapes, costs(rows), acceptance, lookup=LookupRate(rounds=100)).shape.lookup
        nothing = LookupRate(rounds=100, drafted=200, grafted=100, graft_nodes=300)
        assert not choose_shape(shapes, costs(rows), acceptance, lookup=nothing).shape.lookup


def test_lookups_grafts_are_priced_by_the_tokens_and_the_width_they_add():
    """Grafts add about the same tokens to every shape's rows (worth most to the cheapest rounds) and their nodes to
    the verified ones (one grafted row widens the whole batch)."""
    acceptance = observed([0.6, 0.12, 0.06, 0.04, 0.03, 0.02, 0.01, 0.01])

    def choice(rows, **graft):
        costs = RoundCosts(
            batch_size=rows,
            verify=tuple(0.040 + 0.004 * rows * n for n in range(1, 33)),
            draft=tuple(0.002 + 0.0005 * rows * w for w in range(1, 9)),
        )
        rate = LookupRate(rounds=100, drafted=100, **graft)
        return choose_shape(candidate_shapes(max_size=31, lookup=True), costs, acceptance, lookup=rate).shape

    assert choice(1, graft_tokens=60.0).lookup and choice(1, graft_tokens=60.0).size < choice(1).size
    assert not choice(1, graft_tokens=60.0, grafted=50.0, graft_nodes=500.0).lookup  # 10 nodes in half the rows
    assert choice(4, graft_tokens=30.0).lookup
    assert not choice(4, graft_tokens=30.0, grafted=50.0, graft_nodes=150.0).lookup  # most rounds 3 nodes wider


def test_round_time_counts_verification_and_each_level():
    costs = RoundCosts(batch_size=1, verify=(1.0, 2.0, 3.0, 4.0), draft=(0.1, 0.2))
    assert round_time(DraftShape(3, 2, 2), costs, tokens=1.5) == pytest.approx(4.0 + 0.15 + 0.2)
    assert round_time(DraftShape(), costs, tokens=1.0) == 1.0
    assert costs.verify_time(6) == pytest.approx(6.0)  # extended past the last point by its last slope


def test_shapes_name_their_settings():
    assert DraftShape(3, 3, 1).settings() == {"num_assistant_tokens": 3, "draft_tree_size": 0, "draft_lookup": False}
    assert str(DraftShape(16, 4, 4)) == "tree 16/4/4" and str(DraftShape()) == "plain"
    assert str(DraftShape(3, 3, 1, lookup=True)) == "chain 3 + lookup"
    assert DraftShape(3, 1, 3, lookup=True).settings()["draft_lookup"] is True
    assert DraftShape(16, 4, 4).settings()["draft_tree_top_k"] == 4
    assert all(s.size >= s.depth for s in candidate_shapes(max_size=32) if not s.is_plain)


def greedy_reference(shape, acceptance):
    """E by the definition: each node to the depth where it adds most, E recomputed from scratch every time."""
    children = [0] * shape.depth

    def tokens(ms):
        total, reach = 1.0, 1.0
        for j, m in enumerate(ms, start=1):
            reach *= acceptance.coverage(j, m)
            total += reach
        return total

    for _ in range(shape.size):
        options = [j for j in range(shape.depth) if children[j] < shape.top_k and (j == 0 or children[j - 1] > 0)]
        if not options:
            break
        gains = [tokens(children[:j] + [children[j] + 1] + children[j + 1 :]) for j in options]
        children[options[max(range(len(options)), key=lambda i: (gains[i], -i))]] += 1
    return tokens(children)


@pytest.mark.parametrize("seed", range(5))
def test_one_pass_gives_every_size_what_the_definition_gives(seed):
    rng = random.Random(seed)
    acceptance = DepthAcceptance(max_rank=8, max_depth=6)
    for depth in range(1, 7):
        for _ in range(50):
            acceptance.add(depth, rng.choice([1, 1, 1, 2, 3, 5, None]))
    by_size = tokens_by_size(acceptance, 5, 4, 20)
    for size in range(1, 21):
        assert by_size[size] == pytest.approx(greedy_reference(DraftShape(size, 5, 4), acceptance), rel=1e-9)


def simulate(verify, draft, ranks, rounds=240, seed=0):
    """A `ShapeTuner` deciding on a simulated machine (`verify(n)`, `draft(w)` seconds) and drafter (`ranks`: P(the
    target's token is the drafter's m-th likeliest) at every depth; or a function of the round's index giving them)."""
    rng = random.Random(seed)
    log, acceptance = CostLog(batch_size=1), DepthAcceptance(max_rank=8, max_depth=8)
    tuner = ShapeTuner(log, acceptance, start=DraftShape(4, 1, 4))
    used = []
    for index in range(rounds):
        shape = tuner.next_shape()
        accepted = 0
        for depth in range(1, shape.depth + 1):
            draw, rank = rng.random(), None
            for m, p in enumerate(ranks(index) if callable(ranks) else ranks, start=1):
                draw -= p
                if draw < 0:
                    rank = m
                    break
            acceptance.add(depth, rank)
            if rank is None or rank > shape.top_k:
                break
            accepted += 1
        steps = (
            []
            if shape.is_plain
            else [(1 + accepted, draft(1 + accepted))] + [(shape.top_k, draft(shape.top_k))] * (shape.depth - 1)
        )
        tuner.observe(shape, verify(shape.size + 1), steps, accepted, yielded=1.0 + accepted)
        used.append(shape)
    return tuner, used


RANKS = (0.6, 0.12, 0.06, 0.04, 0.03, 0.02, 0.01, 0.01)


def test_the_tuner_settles_on_a_large_tree_where_verification_is_flat():
    tuner, used = simulate(verify=lambda n: 0.010, draft=lambda w: 0.001, ranks=RANKS)
    assert used[0].is_plain and max(s.size for s in used) == 63  # every probe ran
    assert tuner.shape.size >= 16 and tuner.choice.speedup > 2, tuner.shape


def test_while_drafting_a_round_now_and_then_times_plain_decoding_again():
    """The plain rounds' cost, what every choice compares with, is measured again while a drafting shape runs (one
    round in `PLAIN_EVERY`), so that it is this call's, not an earlier call's with other prompt lengths."""
    tuner, used = simulate(verify=lambda n: 0.010, draft=lambda w: 0.001, ranks=RANKS)
    late = used[-96:]
    assert sum(s.is_plain for s in late) == 96 // PLAIN_EVERY and not tuner.shape.is_plain
    assert [i for i, s in enumerate(used) if s.is_plain][-1] % PLAIN_EVERY == PLAIN_EVERY - 1


def test_the_tuner_stops_probing_and_decodes_plain_where_every_token_costs():
    tuner, used = simulate(verify=lambda n: 0.050 * n, draft=lambda w: 0.005, ranks=RANKS)
    assert max(s.size for s in used) <= 7  # wider probes could not pay once 4 tokens cost 4 plain rounds
    assert tuner.shape.is_plain and all(s.is_plain for s in used[-100:])


def test_probing_stops_where_the_drafters_steps_alone_outweigh_what_a_wider_probe_could_yield():
    """Verification nearly flat but every drafter step dear (a large drafter, a slow head): a probe's round costs at
    least its verification plus a step per level, so the probing stops before the widest, deepest probes."""
    tuner, used = simulate(verify=lambda n: 0.100 + 0.001 * n, draft=lambda w: 0.060, ranks=RANKS)
    assert max(s.size for s in used) <= 15, sorted({s.size for s in used})


def test_probing_stops_where_the_cost_per_token_so_far_rules_out_the_wider_probes():
    """Every verified token adds an eighth of a plain round and the drafter's guesses are seldom taken (a batch of 8,
    sampled): a 32-wide probe would cost more than its tokens pay for at the average cost per token measured up to
    16 wide, so it is not run (nor the 64-wide one), where the widest measured width alone would not rule it out."""
    ranks = (0.35, 0.1, 0.05, 0.03, 0.02, 0.01, 0.01, 0.01)
    tuner, used = simulate(verify=lambda n: 0.085 + 0.010 * (n - 1), draft=lambda w: 0.004, ranks=ranks)
    assert max(s.size for s in used) < 31, sorted({s.size for s in used})


def test_a_call_that_chose_plain_on_unlucky_probes_keeps_drafting_now_and_then_and_returns_to_it():
    """Where the probes happened to meet drafts the target rejected (an answer's first tokens), plain decoding is
    chosen; a drafting round now and then (`EXPLORE_AFTER` plain rounds, the wait doubling) keeps measuring the
    acceptance, so that the call drafts again once the drafts are accepted; where they never are, those rounds grow
    rarer."""
    nothing = (0.0,) * 8

    def ranks(index):  # the first 12 rounds accept nothing, the rest as `RANKS`
        return nothing if index < 12 else RANKS

    tuner, used = simulate(verify=FLAT, draft=lambda w: 0.001, ranks=ranks, rounds=120)
    assert any(s.is_plain for s in used[8:16])  # plain chosen after the probes
    assert not tuner.shape.is_plain and sum(not s.is_plain for s in used[-PLAIN_EVERY:]) == PLAIN_EVERY - 1
    tuner, used = simulate(verify=FLAT, draft=lambda w: 0.001, ranks=nothing, rounds=300)
    drafting = [i for i, s in enumerate(used) if not s.is_plain]
    gaps = [b - a for a, b in zip(drafting, drafting[1:])][-4:]
    assert tuner.shape.is_plain and gaps == sorted(gaps) and gaps[-1] >= 4 * gaps[0] >= 4 * (EXPLORE_AFTER + 1)
    timer = RoundTimer(tuner, "cpu", DraftShape)
    timer.shape = used[drafting[-1]]  # the call's last round drafted to explore: the choice reported is plain's
    assert timer.report()["shape"] == "plain"


def test_a_recheck_call_drafts_again_before_it_settles():
    """A call made although plain decoding won (`plain_is_chosen`'s every 8th) drafts its first rounds with the best
    other shape, so that a drafter whose acceptance rose is seen; with nothing accepted it settles on plain again."""
    tuner, _ = simulate(verify=lambda n: 0.050 * n, draft=lambda w: 0.005, ranks=RANKS)
    assert tuner.log.plain_chosen
    again = ShapeTuner(tuner.log, tuner.acceptance, start=DraftShape(4, 1, 4))

    def rejected(shape):
        again.observe(shape, 0.050 * (shape.size + 1), [(1, 0.005)] * shape.depth, 0.0)

    explored = again.next_shape()  # once per round, as the loop asks
    while again.probing:  # a width not measured yet at this batch size is probed first
        rejected(explored)
        explored = again.next_shape()
    assert not explored.is_plain and again.choice.shape.is_plain
    shape = explored
    while True:  # held until the next choice
        assert shape == explored
        rejected(explored)
        shape = again.next_shape()
        if again.rounds % again.every == 0:
            break
    assert shape.is_plain and tuner.log.plain_chosen
    # a call whose batch size last chose a drafting shape does not explore
    assert not ShapeTuner(CostLog(batch_size=1), tuner.acceptance, start=DraftShape()).explore


def test_rechecks_grow_rarer_while_they_keep_choosing_plain(tiny_target):
    """Calls after plain decoding won skip the drafter; one in 8 re-checks it, then one in 16, 32, 64 while each
    re-check chooses plain again; a re-check that drafts brings the wait back to 8."""
    from slimspec_hf import calls_slimspec, costs_slimspec

    tuner, _ = simulate(verify=lambda n: 0.050 * n, draft=lambda w: 0.005, ranks=RANKS)
    drafter = make_tiny_drafter(tiny_target)
    log = costs_slimspec.cost_log(tiny_target, drafter, 1, 10)
    log.verify, log.draft, log.plain_chosen = tuner.log.verify, tuner.log.draft, tuner.log.plain_chosen

    def recheck(accepted: float) -> None:  # one re-check call: it explores, then chooses
        again = ShapeTuner(log, tuner.acceptance, start=DraftShape(4, 1, 4))
        shape = again.next_shape()
        for _ in range(again.every):
            again.observe(shape, 0.050 * (shape.size + 1), [(1, 0.005)] * shape.depth, accepted * shape.depth)
            shape = again.next_shape()

    waits = []
    for _ in range(5):
        calls = 1
        while calls_slimspec.plain_is_chosen(tiny_target, drafter, 1, 10, sampled=False):
            calls += 1
        waits.append(calls)
        recheck(accepted=0.0)
    assert waits == [8, 16, 32, 64, 64] and log.plain_chosen
    # sampled calls keep their own count
    assert not calls_slimspec.plain_is_chosen(tiny_target, drafter, 1, 10, sampled=True)
    log.rechecked(plain=False, again=True)  # a re-check that chose to draft
    calls = 1
    while calls_slimspec.plain_is_chosen(tiny_target, drafter, 1, 10, sampled=False):
        calls += 1
    assert calls == 8


def test_one_slow_round_at_a_width_does_not_rule_it_out():
    """Each width is timed twice before it counts (the lower median): a first round at width 2 that ran slow (a
    kernel chosen, a page fault) no longer makes a paying chain look dear, so the tuner still drafts."""
    seen = set()

    def verify(n):
        slow = n not in seen
        seen.add(n)
        return (0.40 if slow and n == 2 else 0.0) + 0.100 + 0.010 * (n - 1)

    tuner, used = simulate(verify=verify, draft=lambda w: 0.005, ranks=RANKS)
    assert [s.size for s in used[:4]] == [0, 0, 1, 1]  # plain twice, then the first probe twice
    assert max(s.size for s in used[4:10]) >= 7  # and the wider probes go on at once
    assert not tuner.shape.is_plain and tuner.choice.speedup > 1.3, tuner.shape
    assert CostLog.curve(tuner.log.verify)[1] == pytest.approx(0.11)


def machine(monkeypatch, verify, draft=lambda nodes: 0.001):
    """Every tuner reads its rounds' times off `verify(width)` and `draft(nodes)` seconds instead of the clock, so
    that a choice the test relies on does not turn on a loaded test machine's timings."""
    observe = ShapeTuner.observe

    def synthetic(self, shape, verify_seconds, draft_steps, accepted, width=None, rows=None, seconds=None, **counts):
        verified = shape.size + 1 if width is None else width
        steps = [(nodes, draft(nodes)) for nodes, _ in draft_steps]
        return observe(self, shape, verify(verified), steps, accepted, width=width, rows=rows, **counts)

    monkeypatch.setattr(ShapeTuner, "observe", synthetic)


def STEEP(width):  # every token verified costs a plain round: plain decoding wins
    return 0.010 * width


def FLAT(width):  # verification is nearly free: every probe pays
    return 0.010 + 0.0001 * width


def test_measured_costs_are_kept_for_the_next_process(monkeypatch, tmp_path, tiny_target):
    """A call's measured costs are written to the cache folder; a new process (its in-memory logs gone) starts
    from them and chooses at its first round, without plain or probing rounds, and where plain decoding won for
    this drafter its first call decodes plain; another batch size, thread count, drafter architecture, prompt
    length bucket or mode (greedy, sampled) keeps its own file; `SLIMSPEC_DRAFT_COSTS=off` keeps none."""
    machine(monkeypatch, STEEP)
    import weakref

    import torch

    from slimspec_hf import calls_slimspec, costs_slimspec

    monkeypatch.setenv("SLIMSPEC_CACHE", str(tmp_path))
    monkeypatch.setenv("SLIMSPEC_DRAFT_COSTS", "on")
    monkeypatch.setattr(costs_slimspec, "_COSTS", weakref.WeakKeyDictionary())
    drafter = make_tiny_drafter(tiny_target)  # random: accepts almost nothing, so plain decoding wins
    drafter.config._name_or_path = "drafters/tiny"
    ids = torch.tensor([[5, 9, 17, 3, 22, 8, 5, 9, 17, 3]])
    tiny_target.generate(ids, assistant_model=drafter, draft_shape="auto", max_new_tokens=40, do_sample=False)
    assert drafter.last_generation_stats.draft_shape["shape"] == "plain"
    key = costs_slimspec.costs_key(tiny_target, drafter, 1, 10)
    path = costs_slimspec.costs_file(key)
    assert path.parent == tmp_path / "draft_costs" and path.is_file()
    measured = costs_slimspec.cost_log(tiny_target, drafter, 1, 10)
    assert len(measured.verify[1]) >= 2 and [p.name for p in path.parent.iterdir()] == [path.name]
    read = measured.verify_slots[1]  # each plain round read the prompt and the tokens decoded before it
    assert read == sorted(set(read)) and 10 <= read[0] and read[-1] < 10 + 40, read

    monkeypatch.setattr(costs_slimspec, "_COSTS", weakref.WeakKeyDictionary())  # a new process
    assert calls_slimspec.plain_is_chosen(tiny_target, drafter, 1, 10, sampled=False)  # its first call: plain
    assert not calls_slimspec.plain_is_chosen(tiny_target, drafter, 1, 10, sampled=True)  # sampled: not chosen yet
    monkeypatch.setattr(costs_slimspec, "_COSTS", weakref.WeakKeyDictionary())
    other = make_tiny_drafter(tiny_target, seed=5)  # the same architecture, another drafter: costs, not choices
    other.config._name_or_path = "drafters/other"
    kept = costs_slimspec.cost_log(tiny_target, other, 1, 10)
    assert kept.verify == measured.verify and kept.draft == measured.draft and kept.path == path
    assert kept.verify_slots == measured.verify_slots
    assert not calls_slimspec.plain_is_chosen(tiny_target, other, 1, 10, sampled=False)
    tuner = ShapeTuner(kept, DepthAcceptance(), start=DraftShape(4, 1, 4))
    first = tuner.next_shape()  # no plain round first, no width measured again: a choice, or a width not yet probed
    assert tuner.choice is not None or (not first.is_plain and first.size + 1 not in kept.verify)
    assert all(size + 1 not in kept.verify for size in tuner.probes)

    others = [
        costs_slimspec.costs_key(tiny_target, drafter, 4, 10),
        costs_slimspec.costs_key(tiny_target, make_tiny_drafter(tiny_target, head_rank=8), 1, 10),
    ]
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)
    try:
        others.append(costs_slimspec.costs_key(tiny_target, drafter, 1, 10))
    finally:
        torch.set_num_threads(threads)
    others.append(costs_slimspec.costs_key(tiny_target, drafter, 1, 1500))  # a longer prompt: dearer rounds
    others.append(costs_slimspec.costs_key(tiny_target, drafter, 1, 10, sampled=True))  # draws: dearer per node
    assert len({costs_slimspec.costs_file(k) for k in [key, *others]}) == 6
    assert costs_slimspec.costs_key(tiny_target, drafter, 1, 200) == key  # one curve for every short prompt
    assert [costs_slimspec.context_bucket(n) for n in (1, 256, 257, 1500, 2048)] == [256, 256, 512, 2048, 2048]
    assert not costs_slimspec.cost_log(tiny_target, drafter, 4, 10).verify  # nothing kept for it
    assert not costs_slimspec.cost_log(tiny_target, drafter, 1, 10, sampled=True).verify  # nor for sampled calls
    monkeypatch.setenv("SLIMSPEC_DRAFT_COSTS", "off")
    assert costs_slimspec.costs_file(key) is None


def test_a_batch_that_drafts_slower_than_its_plain_calls_decodes_plain_next(monkeypatch, tmp_path, tiny_target):
    """Over several rows `auto`'s first call decodes plain, timed (steps a second: the longest row's tokens up to
    its EOS, after its first); later calls that drafted through their longest row slower than the plain calls (three
    or more, their steps over their seconds, by over `JUDGE_MARGIN` and their noise under the plain calls' median or,
    where faster, the rate that two or more of the loop's plain rounds imply; or one by over `JUDGE_MARGIN_ONE` under
    the slowest
    of two or more plain calls) make the next calls decode plain (re-checked
    later, the wait doubled, judged afresh); one call a little slower does not, nor one far slower than a single plain
    call or than a median that the slowest plain call lies under, nor calls whose steps over their seconds keep up
    (one fast call outweighs two a little slow). Kept with the costs."""
    import time
    import weakref

    import torch

    from slimspec_hf import calls_slimspec, costs_slimspec

    monkeypatch.setenv("SLIMSPEC_CACHE", str(tmp_path))
    monkeypatch.setenv("SLIMSPEC_DRAFT_COSTS", "on")
    monkeypatch.setattr(costs_slimspec, "_COSTS", weakref.WeakKeyDictionary())
    drafter = make_tiny_drafter(tiny_target)
    ids = torch.tensor([[5, 9, 17, 3, 22, 8], [0, 0, 7, 1, 7, 1]])
    kwargs = dict(attention_mask=(ids > 0).long(), max_new_tokens=24, do_sample=False, pad_token_id=0)
    calls = []
    judge = costs_slimspec.judge_call
    monkeypatch.setattr(
        calls_slimspec, "judge_call", lambda *args, **kw: calls.append((*args, *kw.values())) or judge(*args, **kw)
    )
    plain = tiny_target.generate(ids, **kwargs)
    out = tiny_target.generate(ids, assistant_model=drafter, draft_shape="auto", **kwargs)
    assert torch.equal(out, plain) and drafter.last_generation_stats.draft_shape == {"shape": "plain"}
    eos = tiny_target.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
    assert calls[-1][5] == max(calls_slimspec.new_token_counts(plain, 6, eos_ids)) - 1 and calls[-1][7] is False
    log = costs_slimspec.cost_log(tiny_target, drafter, 2, 6)
    assert len(log.plain_rates) == 1 and log.plain_rates[0] == calls[-1][5] / calls[-1][6]
    out = tiny_target.generate(ids, assistant_model=drafter, draft_shape="auto", **kwargs)  # the loop runs
    assert torch.equal(out, plain) and calls[-1][7] is True and len(log.plain_rates) == 1
    assert calls_slimspec.new_token_counts(torch.tensor([[1, 2, 3, 4], [1, 9, 3, 9]]), 1, {9}) == [3, 1]
    # the call timed from its first token on: a slow prompt pass is not counted
    forward = type(tiny_target).forward

    seen = []

    def slow_prompt(self, *args, **kwargs):  # a call's first forward (a new cache) reads the prompts: 0.5 s
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        if not any(cache is other for other in seen):
            seen.append(cache)
            time.sleep(0.5)
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(type(tiny_target), "forward", slow_prompt)
    for drafting in (False, True):
        log.plain_rates = log.plain_rates if drafting else []
        log.plain_chosen = False
        tiny_target.generate(ids, assistant_model=drafter, draft_shape="auto", **kwargs)
        assert calls[-1][7] is drafting and calls[-1][6] < 0.5, calls[-1]
    monkeypatch.setattr(type(tiny_target), "forward", forward)

    log.plain_rates, log.drafted_rates, log.plain_chosen = [100.0, 120.0, 90.0], [], False  # plain median 100/s
    log.verify, log.verify_slots = {}, {}  # the tiny model's plain rounds: their rate is tested below
    costs_slimspec.judge_call(tiny_target, drafter, 2, 6, False, 15, 0.1, False)  # under 16 steps: left out
    costs_slimspec.judge_call(tiny_target, drafter, 2, 6, False, 15, 1.0, True)
    assert log.plain_rates == [100.0, 120.0, 90.0] and not log.plain_chosen
    before = log.recheck_every
    costs_slimspec.judge_call(tiny_target, drafter, 2, 6, False, 92, 1.0, True)  # one call 8% slower: noise
    assert not log.plain_chosen and log.drafted_rates == [92.0]
    costs_slimspec.judge_call(tiny_target, drafter, 2, 6, False, 93, 1.0, True)  # two calls
    assert not log.plain_chosen
    costs_slimspec.judge_call(tiny_target, drafter, 2, 6, False, 91, 1.0, True)  # three: 92.0 a second, 8% slower
    assert log.plain_chosen and log.recheck_every == 2 * before and log.drafted_rates == []
    log.plain_chosen = False  # a re-check chose to draft: its calls judged afresh
    costs_slimspec.judge_call(tiny_target, drafter, 2, 6, False, 93, 1.0, True)
    costs_slimspec.judge_call(tiny_target, drafter, 2, 6, False, 81, 1.0, True)  # 19% slower, one of two
    assert not log.plain_chosen and log.drafted_rates == [93.0, 81.0]
    costs_slimspec.judge_call(tiny_target, drafter, 2, 6, False, 99, 1.0, True)  # 90.4 a second, spread 10%
    assert not log.plain_chosen  # 9.6% under the plain calls, within 5% and the calls' noise (8.2%)
    for rate in (85, 88):  # five calls: 88.8 a second, 11% under, beyond 5% and their noise (5.7%)
        costs_slimspec.judge_call(tiny_target, drafter, 2, 6, False, rate, 1.0, True)
    assert log.plain_chosen
    log.plain_chosen = False
    costs_slimspec.judge_call(
        tiny_target, drafter, 2, 6, False, 79, 1.0, True
    )  # 21% under the median, 12% the slowest
    assert not log.plain_chosen and log.drafted_rates == [79.0]
    costs_slimspec.judge_call(tiny_target, drafter, 2, 6, False, 71, 1.0, True)  # 21% under the slowest plain call
    assert log.plain_chosen and log.drafted_rates == []
    log.plain_chosen, rates = False, log.plain_rates
    log.plain_rates = [100.0]  # one plain call: its luck is no verdict on one call
    costs_slimspec.judge_call(tiny_target, drafter, 2, 6, False, 50, 1.0, True)
    assert not log.plain_chosen and log.drafted_rates == [50.0]
    log.plain_rates, log.drafted_rates = rates, []
    for rate in (94, 94, 120):  # two calls 6% slower, one 20% faster: 101 a second in all (the median 94)
        costs_slimspec.judge_call(tiny_target, drafter, 2, 6, False, rate, 1.0, True)
    assert not log.plain_chosen
    three = costs_slimspec.cost_log(tiny_target, drafter, 3, 6)
    three.plain_rates, three.plain_chosen = [100.0], False  # one plain call, on a slow day
    for rate in (103, 103, 103):  # 3% faster than it
        costs_slimspec.judge_call(tiny_target, drafter, 3, 6, False, rate, 1.0, True)
    assert not three.plain_chosen
    three.drafted_rates = []
    for rate in (95, 85, 90):  # 10% under it: within 5% and the noise of three calls and one plain call (6.4%)
        costs_slimspec.judge_call(tiny_target, drafter, 3, 6, False, rate, 1.0, True)
    assert not three.plain_chosen
    three.drafted_rates = []
    three.add_verify(1, 1 / 110)  # one plain round of the loop: no rate of its own
    costs_slimspec.judge_call(tiny_target, drafter, 3, 6, False, 103, 1.0, True)
    three.add_verify(1, 1 / 110)  # two: plain decoding runs 110 steps a second, under which 103 lost 6%
    for rate in (103, 103):
        costs_slimspec.judge_call(tiny_target, drafter, 3, 6, False, rate, 1.0, True)
    assert three.plain_chosen and three.drafted_rates == []
    three.plain_chosen, three.verify[1] = False, [1 / 90, 1 / 90]  # the rounds slower than the plain call: it stands
    for rate in (92, 92, 92):  # 8% under the plain call
        costs_slimspec.judge_call(tiny_target, drafter, 3, 6, False, rate, 1.0, True)
    assert three.plain_chosen
    log.plain_chosen = True  # a later re-check chose plain
    log.save()
    one = costs_slimspec.cost_log(tiny_target, drafter, 1, 6)
    one.plain_rates = [100.0, 100.0]
    costs_slimspec.judge_call(tiny_target, drafter, 1, 6, False, 50, 1.0, True)  # one row: its rounds decide
    assert not one.plain_chosen
    monkeypatch.setattr(costs_slimspec, "_COSTS", weakref.WeakKeyDictionary())  # a new process
    kept = costs_slimspec.cost_log(tiny_target, drafter, 2, 6)
    assert kept.plain_rates == [100.0, 120.0, 90.0] and kept.plain_chosen and kept.drafted_rates == [94, 94, 120]
    assert calls_slimspec.plain_is_chosen(tiny_target, drafter, 2, 6, sampled=False)


def test_a_batch_size_without_a_choice_starts_plain_where_fewer_rows_or_greedy_calls_chose_plain(
    monkeypatch, tmp_path, tiny_target
):
    """More rows and sampling only make a round's drafts pay less: a batch size with no choice of its own starts
    from plain decoding where these models chose plain at no more rows (any prompt length), greedy or in its own mode,
    in this process or kept by an earlier one; a kept choice of its own stands, and one row's rounds decide nothing
    for batches."""
    import weakref

    from slimspec_hf import calls_slimspec, costs_slimspec

    monkeypatch.setenv("SLIMSPEC_CACHE", str(tmp_path))
    monkeypatch.setenv("SLIMSPEC_DRAFT_COSTS", "on")
    monkeypatch.setattr(costs_slimspec, "_COSTS", weakref.WeakKeyDictionary())
    drafter = make_tiny_drafter(tiny_target)
    log = costs_slimspec.cost_log

    own = log(tiny_target, drafter, 8, 6)  # chose to draft, kept
    own.chose, own.plain_chosen = True, False
    own.save()
    log(tiny_target, drafter, 1, 6).plain_chosen = True  # one row's choice: not the batches'
    assert not log(tiny_target, drafter, 2, 6).plain_chosen
    log(tiny_target, drafter, 3, 6, sampled=True).plain_chosen = True  # sampled: not the greedy calls'
    assert not log(tiny_target, drafter, 4, 6).plain_chosen
    log(tiny_target, drafter, 4, 6).plain_chosen = True
    assert not log(tiny_target, drafter, 3, 6).plain_chosen  # fewer rows: not inherited from more
    assert log(tiny_target, drafter, 4, 600).plain_chosen  # another prompt length
    assert log(tiny_target, drafter, 6, 6).plain_chosen and log(tiny_target, drafter, 5, 6, sampled=True).plain_chosen
    assert calls_slimspec.plain_is_chosen(tiny_target, drafter, 6, 6, sampled=False)  # no plain rate yet: plain
    log(tiny_target, drafter, 6, 6).plain_rates = [100.0]
    assert calls_slimspec.plain_is_chosen(tiny_target, drafter, 6, 6, sampled=False)  # inherited: plain until re-check
    for path in tmp_path.glob("draft_costs/*.json"):
        path.unlink()
    log(tiny_target, drafter, 4, 6).save()
    own.save()
    monkeypatch.setattr(costs_slimspec, "_COSTS", weakref.WeakKeyDictionary())  # a new process
    assert not log(tiny_target, drafter, 8, 6).plain_chosen  # its own kept choice stands
    assert log(tiny_target, drafter, 7, 300, sampled=True).plain_chosen  # from the 4 rows' kept choice
    assert not log(tiny_target, drafter, 3, 300).plain_chosen


def test_a_batch_size_starts_plain_where_fewer_rows_drafted_for_little(monkeypatch, tmp_path, tiny_target):
    """Where three or more calls at fewer rows drafted, in all, under `JUDGE_MARGIN` faster than plain decoding
    (under `HALF_ROWS_MARGIN` at half the rows or fewer), a larger batch size starts plain (more rows gain less
    still); not where they gained more, were too few to say, or ran at the same rows (another prompt length). Plain
    decoding runs as fast as its calls or, where two or more were kept, the loop's own plain rounds say."""
    import weakref

    from slimspec_hf import costs_slimspec

    monkeypatch.setenv("SLIMSPEC_CACHE", str(tmp_path))
    monkeypatch.setenv("SLIMSPEC_DRAFT_COSTS", "on")
    monkeypatch.setattr(costs_slimspec, "_COSTS", weakref.WeakKeyDictionary())
    drafter = make_tiny_drafter(tiny_target)
    log = costs_slimspec.cost_log
    four = log(tiny_target, drafter, 4, 6)
    four.plain_rates, four.drafted_rates = [100.0], [99.0, 99.0]  # two calls: too few to say
    assert not log(tiny_target, drafter, 5, 6).plain_chosen
    four.drafted_rates = [150.0, 105.0, 110.0]  # 118.7 steps a second in all: 19% faster
    assert not log(tiny_target, drafter, 8, 6).plain_chosen
    four.drafted_rates = [150.0, 90.0, 95.0]  # 106.0 in all (the median 95): 6% faster
    assert not log(tiny_target, drafter, 7, 6).plain_chosen  # under twice the rows: a gain over 5% drafts
    assert log(tiny_target, drafter, 10, 6).plain_chosen  # twice the rows or more: a gain under 15% starts plain
    four.drafted_rates = [120.0, 90.0, 95.0]  # 100.1 in all: under 5% faster
    assert log(tiny_target, drafter, 6, 6).plain_chosen
    assert not log(tiny_target, drafter, 4, 600).plain_chosen  # the same rows at another prompt length
    for rows in (6, 10):  # their choices set aside: each would start every larger batch size plain
        log(tiny_target, drafter, rows, 6).plain_chosen = False
    four.drafted_rates = [150.0, 105.0, 110.0]  # 19% over its one plain call (a slow one)
    four.add_verify(1, 1 / 105)  # one plain round of the loop: no rate of its own
    assert not log(tiny_target, drafter, 9, 6).plain_chosen
    four.add_verify(1, 1 / 104)  # two: plain decoding runs 105 steps a second, over which drafting gained 13%
    assert log(tiny_target, drafter, 11, 6).plain_chosen


def test_a_drafter_folder_named_relative_or_absolute_keeps_one_set_of_choices(monkeypatch, tmp_path, tiny_target):
    """The kept plain-decoding choices belong to the drafter, not to how its folder was spelt: a call that loaded it
    as `drafters/tiny` and a later process that loads `/abs/…/drafters/tiny` share them; another folder does not."""
    machine(monkeypatch, STEEP)
    import weakref

    import torch

    from slimspec_hf import calls_slimspec, costs_slimspec

    monkeypatch.setenv("SLIMSPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SLIMSPEC_DRAFT_COSTS", "on")
    monkeypatch.setattr(costs_slimspec, "_COSTS", weakref.WeakKeyDictionary())
    for folder in ("tiny", "elsewhere"):
        (tmp_path / "drafters" / folder).mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    drafter = make_tiny_drafter(tiny_target)  # random: plain decoding wins
    drafter.config._name_or_path = "drafters/tiny"
    ids = torch.tensor([[5, 9, 17, 3, 22, 8, 5, 9, 17, 3]])
    tiny_target.generate(ids, assistant_model=drafter, draft_shape="auto", max_new_tokens=40, do_sample=False)
    assert drafter.last_generation_stats.draft_shape["shape"] == "plain"

    monkeypatch.setattr(costs_slimspec, "_COSTS", weakref.WeakKeyDictionary())  # a new process
    drafter.config._name_or_path = str(tmp_path / "drafters" / "tiny")
    assert calls_slimspec.plain_is_chosen(tiny_target, drafter, 1, 10, sampled=False)
    monkeypatch.setattr(costs_slimspec, "_COSTS", weakref.WeakKeyDictionary())
    drafter.config._name_or_path = str(tmp_path / "drafters" / "elsewhere")
    assert not calls_slimspec.plain_is_chosen(tiny_target, drafter, 1, 10, sampled=False)


def test_kept_costs_that_cannot_be_read_or_written_are_measured_again(monkeypatch, tmp_path, tiny_target, caplog):
    import json

    from slimspec_hf import costs_slimspec

    key = costs_slimspec.costs_key(tiny_target, make_tiny_drafter(tiny_target), 1, 10)
    path = tmp_path / "costs.json"
    for text in ("{not json", json.dumps({"format": 1, "key": {**key, "batch_size": 4}}), '{"format": 1}'):
        path.write_text(text, encoding="utf-8")  # unreadable, another key's, incomplete: nothing is loaded
        log = costs_slimspec.CostLog(1, path=path, key=key).load()
        assert not log.verify and not log.draft
    choices = {"chooser": "", "greedy": {"plain": True, "calls": 3, "every": 16}, "sampled": {"plain": False}}
    stored = {"format": 1, "key": key, "verify": {"1": [0.1, -1.0, float("nan")], "0": [0.2]}, "draft": {"1": [0.01]}}
    path.write_text(json.dumps({**stored, "choices": choices}), encoding="utf-8")
    log = costs_slimspec.CostLog(1, path=path, key=key).load()  # format 1: the choices of this file's mode
    assert log.plain_chosen and log.plain_calls == 3 and log.recheck_every == 16
    path.write_text(json.dumps(stored), encoding="utf-8")
    log = costs_slimspec.CostLog(1, path=path, key=key).load()
    assert log.verify == {1: [0.1]} and log.draft == {1: [0.01]}  # impossible values dropped
    blocked = tmp_path / "file"
    blocked.write_text("", encoding="utf-8")
    log.path = blocked / "draft_costs" / "x.json"  # a folder that cannot be made
    with caplog.at_level("WARNING"):
        log.save()
        log.save()  # warned once: nothing more is written
    assert caplog.text.count("SLIMSPEC_CACHE to a writable folder") == 1 and log.path is None
    log.path = tmp_path / "kept" / "x.json"
    log.save()
    assert [p.name for p in log.path.parent.iterdir()] == ["x.json"]  # no temporary file left behind
    assert costs_slimspec.CostLog(1, path=log.path, key=key).load().verify == {1: [0.1]}
    # a write cut short (disk full, killed) leaves the kept file as it was
    write_text = type(log.path).write_text

    def cut_short(self, text, *args, **kwargs):
        write_text(self, text[: len(text) // 2], *args, **kwargs)
        raise OSError("No space left on device")

    log.add_verify(1, 0.2)
    monkeypatch.setattr(type(log.path), "write_text", cut_short)
    log.save()
    monkeypatch.undo()
    assert costs_slimspec.CostLog(1, path=tmp_path / "kept" / "x.json", key=key).load().verify == {1: [0.1]}
    assert [p.name for p in (tmp_path / "kept").iterdir()] == ["x.json"]  # the half-written copy removed


# -- `draft_shape="auto"` in the decoding loop --------------------------------------------------------------------


def forced_shapes(monkeypatch, shapes):
    """Every tuner's rounds take `shapes` in turn (plain rounds included), whatever it measured; every call runs the
    decoding loop (no plain call chosen or timed for `judge_call`)."""
    import itertools

    from slimspec_hf import decoding_slimspec

    cycle = itertools.cycle(shapes)
    monkeypatch.setattr(ShapeTuner, "next_shape", lambda self, rows=None, slots=None: next(cycle))
    monkeypatch.setattr(decoding_slimspec, "plain_is_chosen", lambda *args: False)


SHAPE_CYCLE = [DraftShape(), DraftShape(1, 1, 1), DraftShape(3, 3, 1), DraftShape(4, 1, 4), DraftShape(6, 3, 2)]


@pytest.mark.parametrize("lookup", [False, True])
def test_auto_shapes_changing_every_round_keep_greedy_output(monkeypatch, tiny_target, lookup):
    import torch

    forced_shapes(monkeypatch, SHAPE_CYCLE)
    drafter = make_tiny_drafter(tiny_target)
    prompts = [[5, 9, 17, 3, 22, 8, 5, 9, 17, 3], [7, 1, 7, 1], [2, 30, 41, 2, 30, 41, 2]]
    for rows in ([prompts[0]], prompts):
        length = max(len(p) for p in rows)
        ids = torch.tensor([[0] * (length - len(p)) + p for p in rows])
        mask = torch.tensor([[0] * (length - len(p)) + [1] * len(p) for p in rows])
        kwargs = dict(attention_mask=mask, max_new_tokens=24, do_sample=False, pad_token_id=0)
        plain = tiny_target.generate(ids, **kwargs)
        out = tiny_target.generate(ids, assistant_model=drafter, draft_shape="auto", draft_lookup=lookup, **kwargs)
        assert torch.equal(out, plain)
        stats = drafter.last_generation_stats
        assert stats.rounds_by_source.get("plain", 0) > 0 and stats.draft_shape["shape"] in {
            str(s) for s in SHAPE_CYCLE
        }


def test_a_plain_round_verifies_one_token_even_where_lookup_matches(monkeypatch, tiny_target):
    """Plain rounds cost what plain decoding costs (what the choice assumes): no lookup draft either."""
    import torch

    forced_shapes(monkeypatch, [DraftShape()])
    drafter = make_tiny_drafter(tiny_target)
    ids = torch.tensor([[5, 9, 17, 3] * 6])  # lookup matches at every round
    kwargs = dict(max_new_tokens=16, do_sample=False)
    out = tiny_target.generate(ids, assistant_model=drafter, draft_shape="auto", draft_lookup=True, **kwargs)
    assert torch.equal(out, tiny_target.generate(ids, **kwargs))
    stats = drafter.last_generation_stats
    assert set(stats.rounds_by_source) == {"plain"} and stats.drafted_tokens == 0, stats.rounds_by_source
    forced_shapes(monkeypatch, [DraftShape(1, 1, 1, lookup=True)])  # drafting with lookup: lookup does take part
    tiny_target.generate(ids, assistant_model=drafter, draft_shape="auto", draft_lookup=True, **kwargs)
    assert set(drafter.last_generation_stats.rounds_by_source) & {"lookup", "drafter+lookup"}


@pytest.mark.parametrize("rows", [1, 2])
def test_an_auto_round_drafts_with_lookup_exactly_where_its_shape_does(monkeypatch, tiny_target, rows):
    """In a batch one row's lookup match widens every row's verification: whether a round drafts with lookup is
    part of its shape, priced by the choice (`lookup_round`), at every batch size."""
    import torch

    ids = torch.tensor([[5, 9, 17, 3] * 6, [7, 1, 2, 8] * 6][:rows])  # lookup matches at every round, in each row
    kwargs = dict(max_new_tokens=16, do_sample=False, draft_lookup=True, draft_shape="auto")
    plain = tiny_target.generate(ids, max_new_tokens=16, do_sample=False)
    for lookup in (False, True):
        forced_shapes(monkeypatch, [DraftShape(1, 1, 1, lookup=lookup)])
        drafter = make_tiny_drafter(tiny_target)
        assert torch.equal(tiny_target.generate(ids, assistant_model=drafter, **kwargs), plain)
        sources = set(drafter.last_generation_stats.rounds_by_source)
        assert (sources == {"drafter"}) is not lookup and bool(sources & {"lookup", "drafter+lookup"}) is lookup


def test_lookup_rate_counts_what_lookup_would_draft_and_agrees_with_what_it_drafted(monkeypatch, tiny_target):
    """Every round of an `auto` call counts lookup's match, whether or not it drafts with it; where it does, the
    count is the acceptance measured: its drafts' agreement with the tokens the target went on to emit."""
    import torch

    from slimspec_hf.acceptance_slimspec import lookup_rate

    ids = torch.tensor([[5, 9, 17, 3, 22, 8, 5, 9, 17, 3, 7, 1, 7, 1, 2, 30, 41, 2, 30, 41]])
    kwargs = dict(max_new_tokens=40, do_sample=False, draft_lookup=True, draft_shape="auto")
    rates = {}
    for lookup in (False, True):
        forced_shapes(monkeypatch, [DraftShape(1, 1, 1, lookup=lookup)])
        drafter = make_tiny_drafter(tiny_target)
        tiny_target.generate(ids, assistant_model=drafter, **kwargs)
        stats, rates[lookup] = drafter.last_generation_stats, lookup_rate(drafter, False)
        assert rates[lookup].rounds == stats.rounds
    assert rates[False].alone > 0  # counted without drafting with it
    rounds, accepted = stats.rounds_by_source["lookup"], stats.accepted_by_source.get("lookup", 0)
    assert rates[True].alone == rounds and rates[True].tokens == accepted + rounds
    assert rates[True].round_tokens > 1.0  # the tiny target repeats itself: some of lookup's drafts hold
    assert rates[False].drafted == 0  # no graft measured where lookup did not draft
    # lookup as a branch beside the drafter's draft, never alone (sampling's settings): what it adds to the drafter's
    # rows, counted apart from the drafter's own acceptance
    drafter = make_tiny_drafter(tiny_target)
    branches = dict(draft_lookup_min_ngram=8, draft_lookup_branch_ngram=1)
    tiny_target.generate(ids, assistant_model=drafter, **kwargs, **branches)
    stats, rate = drafter.last_generation_stats, lookup_rate(drafter, False)
    sources = stats.rounds_by_source
    assert rate.drafted == sources.get("drafter", 0) + sources.get("drafter+lookup", 0)
    assert 0 < rate.graft_tokens <= stats.accepted_by_source["drafter+lookup"]
    assert 0 < rate.grafted <= sources["drafter+lookup"] and rate.graft_width >= 1.0


def test_a_call_that_sets_a_shape_keeps_it_and_auto_decodes_plain_once_plain_wins(monkeypatch, tiny_target):
    import torch

    machine(monkeypatch, STEEP)

    from slimspec_hf.drafting_slimspec import DraftSettings

    drafter = make_tiny_drafter(tiny_target)  # random: accepts almost nothing, so plain decoding wins
    drafter.generation_config.draft_shape = "auto"  # the drafter's default, as a shipped drafter's
    ids = torch.tensor([[5, 9, 17, 3, 22, 8, 5, 9, 17, 3]])
    tiny_target.generate(ids, assistant_model=drafter, max_new_tokens=40, do_sample=False)
    first = drafter.last_generation_stats
    assert first.rounds_by_source.get("plain", 0) > 0 and first.draft_shape["shape"] == "plain"
    tiny_target.generate(ids, assistant_model=drafter, max_new_tokens=8, do_sample=False)
    assert drafter.last_generation_stats.rounds == 0  # plain generate(): no round of the loop
    assert drafter.last_generation_stats.draft_shape == {"shape": "plain"}
    # a shape the call sets wins over the machine's choice
    from slimspec_hf.acceptance_slimspec import depth_acceptance

    counted = depth_acceptance(drafter, False).observed(1)
    tiny_target.generate(ids, assistant_model=drafter, max_new_tokens=8, do_sample=False, num_assistant_tokens=2)
    assert drafter.last_generation_stats.rounds > 0 and not drafter.last_generation_stats.draft_shape
    # a fixed shape's rounds count the drafter's per-depth acceptance too: one observation per round that drafted
    drafted = drafter.last_generation_stats.drafted_per_position[0]
    assert drafted > 0 and depth_acceptance(drafter, False).observed(1) == counted + drafted
    auto = drafter.generation_config
    assert DraftSettings.resolve(auto, {"draft_tree_size": 8}).draft_shape == "fixed"
    assert (
        DraftSettings.resolve(auto, {"draft_batched": {"num_assistant_tokens": 2}}, batched=True).draft_shape
        == "fixed"
    )
    assert DraftSettings.resolve(auto, {"draft_lookup": True}).draft_shape == "auto"  # not a shape setting
    assert DraftSettings.resolve(auto, {"draft_shape": "auto", "draft_tree_size": 8}).draft_shape == "auto"
    with pytest.raises(ValueError, match="`draft_shape` must be one of \\['auto', 'fixed'\\], got 'fast'"):
        DraftSettings(draft_shape="fast")


def test_depths_are_counted_below_the_nodes_the_drafter_ranked():
    from slimspec_hf.acceptance_slimspec import record_depths
    from slimspec_hf.drafting_slimspec import DraftTree

    tree = DraftTree()
    a = tree.add(11, -1, -0.1)  # depth 1
    b = tree.add(12, a, -0.2)  # depth 2
    tree.ranked = {-1: [11, 40, 41], a: [50, 12, 51], b: [60, 61, 62]}
    acceptance = DepthAcceptance(max_rank=3, max_depth=4, prior_weight=0.0)
    record_depths(acceptance, tree, path=[a, b], token=61, sampled=False)  # ranks 1, 2, then the target's 61: 2
    record_depths(acceptance, tree, path=[a], token=99, sampled=False)  # rank 1, then 99 not among the three
    assert acceptance.counts[0][:4] == [2.0, 0.0, 0.0, 0.0]
    assert acceptance.counts[1][:4] == [0.0, 1.0, 0.0, 1.0]
    assert acceptance.counts[2][:4] == [0.0, 1.0, 0.0, 0.0]


def test_a_sampled_round_counts_which_draw_was_accepted():
    """Draws are tested in the order drawn: the first draw of the token emitted is the one accepted (a rejected
    draw's token keeps no mass), a token no draw holds means all were rejected, and a lookup draft accepted before
    the draws says nothing of them."""
    import torch

    from slimspec_hf.acceptance_slimspec import record_depths
    from slimspec_hf.drafting_slimspec import DraftTree, Proposal

    q = torch.ones(1)
    tree = DraftTree()
    seven, a = tree.add(7, -1, -0.1), tree.add(11, -1, -0.2)
    b, c = tree.add(20, a, -0.3), tree.add(21, a, -0.4)
    tree.proposals = {
        -1: [Proposal(7, seven, q), Proposal(11, a, q), Proposal(7, seven, q)],
        a: [Proposal(20, b, q), Proposal(21, c, q)],
    }
    acceptance = DepthAcceptance(max_rank=4, max_depth=3, prior_weight=0.0, draws=True)
    record_depths(acceptance, tree, path=[a], token=99, sampled=True)  # draw 2 of 3, then neither of 2
    record_depths(acceptance, tree, path=[], token=7, sampled=True)  # the pruned draw 1 of 3 (round ends there)
    assert acceptance.counts[0] == [1.0, 1.0, 0.0, 0.0, 0.0] and acceptance.censored[1] == [0.0, 1.0, 0.0, 0.0]
    tree.proposals[-1].insert(0, Proposal(11, a, None))  # a lookup draft, tested first
    record_depths(acceptance, tree, path=[a], token=99, sampled=True)
    assert acceptance.observed(1) == 2.0 and acceptance.observed(2) == 1.0


def test_sampled_coverage_reads_each_draws_measured_acceptance():
    """m draws cover what their measured acceptance says, not 1 - (1 - c)^m: rounds of 4 draws accepting 40% at the
    first and 10 of the 60 left at the second cover 0.5 with 2 to 4 draws; rounds of one draw say nothing of later
    ones (each later draw takes the first one's rate); a stored sampled measurement without `censored` reads as one
    draw a round."""
    acceptance = DepthAcceptance(max_rank=4, max_depth=1, prior_weight=0.0, draws=True)
    for accepted, rounds in ((1, 40), (2, 10), (None, 50)):
        for _ in range(rounds):
            acceptance.add_draw(1, accepted, drawn=4)
    assert [acceptance.coverage(1, m) for m in range(5)] == pytest.approx([0.0, 0.4, 0.5, 0.5, 0.5])
    chains = DepthAcceptance(max_rank=4, max_depth=1, prior_weight=0.0, draws=True)
    for accepted, rounds in ((1, 40), (None, 60)):
        for _ in range(rounds):
            chains.add_draw(1, accepted, drawn=1)
    assert chains.coverage(1, 2) == pytest.approx(1 - 0.6**2) and chains.coverage(1, 6) == pytest.approx(1 - 0.6**6)
    kept = DepthAcceptance.from_dict(acceptance.as_dict(), draws=True, prior_weight=0.0)
    assert kept.coverage(1, 3) == pytest.approx(0.5)
    stored = DepthAcceptance.from_dict({"max_rank": 2, "counts": [[30.0, 0.0, 70.0]]}, draws=True, prior_weight=0.0)
    assert stored.coverage(1, 1) == pytest.approx(0.3) and stored.censored == [[70.0, 0.0]]


def test_a_new_prompt_length_borrows_the_costs_measured_at_another(monkeypatch, tmp_path, tiny_target):
    """A prompt length with no wider rounds of its own takes the nearest measured one's costs, scaled by the two
    plain rounds' ratio, and probes only the widths no prompt length measured; its own measurements win; the other
    length's costs are read from the kept file in a new process."""
    import weakref

    from slimspec_hf import costs_slimspec

    monkeypatch.setenv("SLIMSPEC_CACHE", str(tmp_path))
    monkeypatch.setenv("SLIMSPEC_DRAFT_COSTS", "on")
    monkeypatch.setattr(costs_slimspec, "_COSTS", weakref.WeakKeyDictionary())
    drafter = make_tiny_drafter(tiny_target)
    short = costs_slimspec.cost_log(tiny_target, drafter, 1, 10)  # prompts up to 256 tokens
    for width in (1, 2, 4, 8, 16):
        short.add_verify(width, 0.1 + 0.01 * (width - 1))
    short.add_draft(1, 0.005)
    far = costs_slimspec.cost_log(tiny_target, drafter, 1, 5000)  # the 8192 bucket: farther from 1024 than 256
    for width, seconds in ((1, 1.0), (2, 1.0)):
        far.add_verify(width, seconds)
    far.add_draft(1, 0.05)
    long = costs_slimspec.cost_log(tiny_target, drafter, 1, 600)  # the 1024 bucket
    assert long.costs() is None  # its plain rounds come first
    assert ShapeTuner(long, DepthAcceptance(), start=DraftShape(4, 1, 4)).probes == [31, 63]
    long.add_verify(1, 0.2)
    costs = long.costs()
    assert costs.verify[7] == pytest.approx(2 * 0.17) and costs.draft[0] == pytest.approx(0.005)
    long.add_verify(8, 0.4)  # its own measurement wins
    assert long.costs().verify[7] == pytest.approx(0.4) and long.costs().verify[15] == pytest.approx(0.5)
    short.save()
    monkeypatch.setattr(costs_slimspec, "_COSTS", weakref.WeakKeyDictionary())  # a new process
    fresh = costs_slimspec.cost_log(tiny_target, drafter, 1, 600)
    fresh.add_verify(1, 0.3)
    assert fresh.costs().verify[3] == pytest.approx(3 * 0.13)


def test_a_probe_round_measures_its_own_width_without_lookups_grafts(monkeypatch, tiny_target):
    """Where prompt lookup matches at every round, the probes still verify their own widths (2, 4, 8, ...): lookup's
    grafts would widen them and leave the narrow widths, a chain's, unmeasured."""
    machine(monkeypatch, FLAT)
    import weakref

    import torch

    from slimspec_hf import costs_slimspec

    monkeypatch.setattr(costs_slimspec, "_COSTS", weakref.WeakKeyDictionary())
    drafter = make_tiny_drafter(tiny_target)
    ids = torch.tensor([[5, 9, 17, 3] * 6])  # lookup matches at every round
    kwargs = dict(max_new_tokens=40, do_sample=False)
    out = tiny_target.generate(ids, assistant_model=drafter, draft_shape="auto", draft_lookup=True, **kwargs)
    assert torch.equal(out, tiny_target.generate(ids, **kwargs))
    log = costs_slimspec.cost_log(tiny_target, drafter, 1, ids.shape[1])
    assert {1, 2, 4, 8} <= set(log.verify), sorted(log.verify)
    # the same rounds with their shape set: lookup does draft in them
    tiny_target.generate(ids, assistant_model=drafter, draft_lookup=True, num_assistant_tokens=1, **kwargs)
    assert set(drafter.last_generation_stats.rounds_by_source) & {"lookup", "drafter+lookup"}


@pytest.mark.parametrize("spread, drafts", [(0.0, True), (0.05, False)])
def test_a_predicted_gain_within_the_plain_rounds_spread_decodes_plain(spread, drafts):
    """A chain predicted 4% faster than plain decoding is chosen where plain rounds take the same time every time,
    not where they vary by 5% (the margin: the standard error of the two estimates, `CostLog.margin`)."""
    log = CostLog(batch_size=8)
    for i in range(9):  # plain rounds of 0.2 s, ± spread
        log.add_verify(1, 0.200 * (1 + spread * (i % 3 - 1)))
    for width in (2, 4, 8, 16, 32, 64):  # every probe width measured: the choice comes first
        log.add_verify(width, 0.200 * (1 + 0.52 * (width - 1)))
    log.add_draft(1, 0.004)
    log.add_draft(2, 0.005)
    # the settings' tree, tried, does not beat plain decoding: the untried chain is not held back against plain
    tuner = ShapeTuner(log, observed(RANKS), start=DraftShape(4, 1, 4))
    shape = tuner.next_shape()
    assert tuner.choice.predictions["chain 1"] / tuner.choice.predictions["plain"] == pytest.approx(1.04, abs=0.005)
    assert log.margin() == pytest.approx(math.sqrt(2) * 1.25 * 1.4826 * spread / 3, rel=1e-6)
    assert shape == (DraftShape(1, 1, 1) if drafts else DraftShape()), shape


@pytest.mark.parametrize("slots_known", [True, False])
def test_rounds_timed_over_longer_caches_are_priced_at_the_coming_rounds_cache(slots_known, tmp_path):
    """Plain rounds kept from late in calls (400-480 cache slots) and wider ones from early (100-180) are brought to
    the coming round's cache (`CostLog.slope`, `verify_at`): at 100 slots a chain that costs 1% more a token than
    plain decoding there loses, where the late plain rounds' price would have made it look 15% faster. The slots are
    kept with the costs for the next process; rounds whose slots are unknown are priced as timed."""
    slope = 0.0002  # seconds a cache slot adds to a round, every width alike

    def cost(width, slots):  # at 100 slots: 0.2 s a plain round, 60% of that per token more
        return 0.200 * (1 + 0.60 * (width - 1)) + slope * (slots - 100)

    log = CostLog(batch_size=8, path=tmp_path / "costs.json", key={"batch_size": 8})
    for i in range(9):
        at = 400 + 10 * i
        log.add_verify(1, cost(1, at) * (1.2 if i == 8 else 1.0), at if slots_known else None)  # one slowed round
    for i, width in enumerate((2, 4, 8, 16, 32, 64)):
        at = 100 + 16 * i
        log.add_verify(width, cost(width, at), at if slots_known else None)
    log.add_draft(1, 0.004)
    log.add_draft(2, 0.005)
    tuner = ShapeTuner(log, observed(RANKS), start=DraftShape(4, 1, 4))
    shape = tuner.next_shape(slots=100)
    priced = log.costs(100)
    if slots_known:
        assert log.slope() == pytest.approx(slope, rel=1e-6)
        assert priced.verify_time(1) == pytest.approx(cost(1, 100), rel=1e-6)
        assert priced.verify_time(2) == pytest.approx(cost(2, 100), rel=0.1)
        assert log.costs().verify_time(1) == pytest.approx(cost(1, 440), rel=1e-6)  # as timed: the lower median
        assert shape == DraftShape(), tuner.choice.predictions
        kept = CostLog(batch_size=8, path=log.path, key={"batch_size": 8}).load() if log.save() is None else None
        assert kept.slope() == pytest.approx(slope, rel=1e-6) and kept.verify_slots == log.verify_slots
    else:
        assert log.slope() == 0.0 and priced.verify_time(1) == pytest.approx(cost(1, 440), rel=1e-6)
        assert not shape.is_plain, tuner.choice.predictions


def test_where_the_settings_decode_a_batch_plain_an_untried_shape_must_beat_plain_decoding_by_ten_percent(
    monkeypatch, tiny_target
):
    """Above `draft_max_batch_size` the settings decode plain, and `auto` starts there: a drafting shape not tried at
    that batch size must be predicted `UNTRIED_MARGIN` faster than plain decoding (at 8 rows, sampled, shapes priced
    3-15% ahead of it ran 0.67-0.92 of it); once its rounds are measured the usual margin holds again."""
    import weakref

    from slimspec_hf import costs_slimspec
    from slimspec_hf.drafting_slimspec import DraftSettings
    from slimspec_hf.shapes_slimspec import round_timer

    log = CostLog(batch_size=8)
    for _ in range(9):
        log.add_verify(1, 0.200)
    for width in (2, 4, 8, 16, 32, 64):
        log.add_verify(width, 0.200 * (1 + 0.52 * (width - 1)))
    log.add_draft(1, 0.004)
    log.add_draft(2, 0.005)
    tuner = ShapeTuner(log, observed(RANKS), start=DraftShape())
    assert tuner.next_shape() == DraftShape()
    assert tuner.choice.predictions["chain 1"] / tuner.choice.predictions["plain"] == pytest.approx(1.04, abs=0.005)
    log.speed.add("chain 1", 0.1, 0.1)  # rounds of the chain measured at this batch size
    tuner.rounds = tuner.every
    assert tuner.next_shape() == DraftShape(1, 1, 1)
    # a call starts from plain decoding where its settings decode the batch plain, else from the settings' shape
    monkeypatch.setattr(costs_slimspec, "_COSTS", weakref.WeakKeyDictionary())
    drafter = make_tiny_drafter(tiny_target)
    shape = {"draft_tree_size": 3, "draft_tree_depth": 1, "draft_tree_top_k": 3}
    settings = DraftSettings(draft_shape="auto", draft_max_batch_size=4, **shape)
    for rows, start in ((8, DraftShape()), (4, DraftShape(3, 1, 3)), (1, DraftShape(3, 1, 3))):
        timer = round_timer(settings, tiny_target, drafter, settings.tree_shape(), rows, 16, True)
        assert timer.tuner.start == start, rows


def _flat_costs_log() -> CostLog:
    """One row whose wider rounds cost little more (verification nearly free), every probe width measured."""
    log = CostLog(batch_size=1)
    for _ in range(9):
        log.add_verify(1, 0.100)
    for width in (2, 4, 8, 16, 32, 64):
        log.add_verify(width, 0.100 * (1 + 0.01 * (width - 1)))
    for nodes in (1, 2, 4, 8):
        log.add_draft(nodes, 0.004)
    return log


def test_a_shape_not_tried_must_be_predicted_ten_percent_faster_than_the_best_tried():
    log, acceptance = _flat_costs_log(), observed(RANKS)
    costs = log.costs()
    candidates = candidate_shapes(len(costs.verify) - 1, acceptance.max_depth)
    free = choose_shape(candidates, costs, acceptance)  # every shape tried: the best predicted
    predicted, best = free.predictions, free.shape
    behind = {
        s: predicted[str(best)] / predicted[str(s)] for s in candidates if str(s) in predicted and not s.is_plain
    }
    near = next(s for s, ratio in behind.items() if 1.04 < ratio < 1.09)  # within the margin of the best
    far = next(s for s, ratio in behind.items() if 1.12 < ratio < 1.3)  # beyond it
    for tried, chosen in ((near, near), (far, best)):
        choice = choose_shape(candidates, costs, acceptance, tried=lambda name, t=tried: name in (str(t), "plain"))
        assert choice.shape == chosen, (tried, choice.shape)
        assert choice.tokens_per_second == predicted[str(chosen)]  # the prediction reported as it is
    # in a call: the settings' shape counts as tried; once the best one's rounds are measured, it is chosen
    tuner = ShapeTuner(log, acceptance, start=near)
    assert tuner.next_shape() == near
    log.speed.add(str(best), 0.1, 0.1)
    tuner.rounds = tuner.every
    assert tuner.next_shape() == best
