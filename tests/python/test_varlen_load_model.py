# Checks bench/varlen_load_model.py, the CPU model that perf-notes quotes for the packed tile orders
# (static round-robin against the dynamic counter): its orders deal every tile exactly once, and the
# figures quoted in docs/perf-notes.md ("a load model") come out of it. No torch, no GPU.
import itertools

import pytest

import varlen_load_model as lm  # bench/varlen_load_model.py; conftest.py puts bench/ on sys.path


@pytest.mark.parametrize("causal,fold,balanced", [(False, False, False), (True, True, False), (True, False, True),
                                                  (True, False, False)])
@pytest.mark.parametrize("nb,heads", [(1, 1), (5, 3), (11, 16), (6, 2)])
def test_tiles_of_one_sequence_cover_each_block_and_head_once(causal, fold, balanced, nb, heads):
    n = (2 * ((nb + 1) // 2) if fold else nb) * heads
    got = [lm.varlen_tile_in(i, nb, heads, causal, fold, balanced) for i in range(n)]
    real = sorted(t for t in got if t[0] >= 0)
    assert real == sorted(itertools.product(range(nb), range(heads)))


@pytest.mark.parametrize("fold,snake", [(False, False), (False, True), (True, False)])
@pytest.mark.parametrize("n,ctas", [(7, 3), (40, 132), (1000, 132), (264, 132)])
def test_static_and_dynamic_deal_every_tile_once(fold, snake, n, ctas):
    n += n % 2 if fold else 0  # folded lists hold whole units
    costs = [1 + (i * 7919) % 13 for i in range(n)]
    static, dynamic = lm.static_loads(costs, ctas, fold, snake), lm.dynamic_loads(costs, ctas)
    assert sum(static) == sum(costs) and sum(dynamic) == sum(costs)
    assert len(static) == min(ctas, n // 2 if fold else n)  # grid_size: never more CTAs than items
    assert len(dynamic) == min(ctas, n)


def test_round_robin_indices_grow_for_every_cta():
    # VarlenTileScheduler's resumable search needs each CTA's indices to grow.
    for fold, snake, g, b in itertools.product((False, True), (False, True), (1, 7, 132), (0, 3, 6)):
        if b >= g:
            continue
        idx = [lm.round_robin_index(r, g, b, fold, snake) for r in range(20)]
        assert idx == sorted(set(idx))


def test_the_figures_perf_notes_quotes():
    # Powers-of-two mix, d64 (192-row tiles), 16 heads, 132 CTAs, overhead 2 key blocks per tile:
    # the static order's busiest CTA at 1.050 of the mean, the dynamic order's at 1.002.
    shape = lm.Shape(192, 128, 16, True, 2.0)
    m = lm.model(shape, lm.parse_mix("powers"), 132)
    assert round(m["packed_static"] / m["mean"], 3) == 1.050
    assert round(m["packed_dynamic"] / m["mean"], 3) == 1.002
    # Equal sequences (4 x 8k): the packed static order 1.032, the fixed-length call 1.005.
    m = lm.model(shape, lm.parse_mix("8192x4"), 132)
    assert round(m["packed_static"] / m["mean"], 3) == 1.032
    assert round(m["fixed"] / m["fixed_mean"], 3) == 1.005


def test_dynamic_never_worse_than_a_tile_above_the_mean():
    # Greedy dealing ends every CTA within one tile's cost of the mean.
    for mix in ("powers", "uniform", "2048x16"):
        for causal in (False, True):
            shape = lm.Shape(192, 128, 16, causal, 2.0)
            lens = lm.parse_mix(mix)
            costs = lm.packed_tiles(shape, lens)
            assert max(lm.dynamic_loads(costs, 132)) <= sum(costs) / 132 + max(costs)


def test_arguments(capsys):
    with pytest.raises(SystemExit) as bad:
        lm.main(["--mix", "lots"])
    assert bad.value.code == 2
    lm.main(["--mix", "2048x4", "--hdim", "128"])
    out = capsys.readouterr().out
    assert "| causal |" in out and "| full |" in out
