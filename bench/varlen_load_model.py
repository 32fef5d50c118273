#!/usr/bin/env python3
# Load model of the forward kernel's persistent tile orders (no GPU): how evenly a packed (varlen)
# batch's tiles land on the CTAs under the static round-robin and under the dynamic (counter) order,
# against the same sequences run as fixed-length calls, one call per distinct length.
#
# A tile costs its visible key blocks plus `overhead` (the per-tile prologue and epilogue, in key
# blocks). A CTA's load is the sum of its tiles' costs; a call's time is its busiest CTA's load. The
# orders are ports of src/sm90/ws/varlen_tile_order.hpp (packed) and TileOrder/StaticTileScheduler in
# src/sm90/ws/tile_scheduler.hpp (fixed-length), with heuristics.cpp's choices: causal 128-row tiles
# fold, 192-row ones (d64) take the balanced order (packed) or snake rounds at >= 4k (fixed-length).
# perf-notes ("a load model") quotes this model; the dynamic order is the FP8 d64 packed kernels'.
#
#   python3 bench/varlen_load_model.py [--hdim 64] [--mix powers|uniform|LxB] [--overhead 2]
import argparse
import heapq
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from varlen import POWERS_MIX, random_mix  # noqa: E402  (bench/varlen.py: the benchmark's mixes)


def cdiv(a, b):
    return -(-a // b)


def folded_m_block(u, half, nb):
    m_long = nb - 1 - u
    return m_long if half == 0 else (-1 if u == m_long else u)


def round_robin_index(r, g, b, fold, snake):
    if fold:
        return 2 * ((r >> 1) * g + b) + (r & 1)
    return r * g + (g - 1 - b if snake and (r & 1) else b)


def varlen_tile_in(i, nb, heads, causal, fold, balanced):
    """(m_block, head) of tile i of one sequence; m_block -1 is the empty half of a folded unit."""
    if causal and fold:
        unit, upb = i >> 1, (nb + 1) // 2
        return folded_m_block(unit % upb, i & 1, nb), unit // upb
    if causal and balanced:
        return nb - 1 - i // heads, i % heads
    return (nb - 1 - i % nb if causal else i % nb), i // nb


class Shape:
    def __init__(self, block_m, block_n, heads, causal, overhead):
        self.block_m, self.block_n, self.heads, self.causal, self.overhead = block_m, block_n, heads, causal, overhead
        self.fold = causal and block_m == 128  # heuristics::causal_fold_order

    def cost(self, m_block, length):
        """Key blocks a query block of a length x length sequence visits, plus the per-tile overhead."""
        if m_block < 0:
            return 0
        if not self.causal:
            return cdiv(length, self.block_n) + self.overhead
        last_row = min((m_block + 1) * self.block_m, length)
        return cdiv(last_row, self.block_n) + self.overhead


def packed_tiles(shape, lens):
    """Tile costs in the packed work-index order (sequence by sequence)."""
    costs = []
    for length in lens:
        nb = cdiv(length, shape.block_m)
        n = (2 * ((nb + 1) // 2) if shape.fold else nb) * shape.heads
        for i in range(n):
            m, _ = varlen_tile_in(i, nb, shape.heads, shape.causal, shape.fold, balanced=True)
            costs.append(shape.cost(m, length))
    return costs


def fixed_tiles(shape, length, batch):
    """Tile costs of one fixed-length call in TileOrder's work-index order."""
    nb, heads, costs = cdiv(length, shape.block_m), shape.heads, []
    if shape.causal and shape.fold:
        for _pair in range(heads * batch):
            for u in range((nb + 1) // 2):
                costs += [shape.cost(folded_m_block(u, 0, nb), length), shape.cost(folded_m_block(u, 1, nb), length)]
    elif shape.causal:  # heads fastest, then batch, m_block descending
        for idx in range(nb * heads * batch):
            costs.append(shape.cost(nb - 1 - idx // (heads * batch), length))
    else:
        costs = [shape.cost(idx % nb, length) for idx in range(nb * heads * batch)]
    return costs


def static_loads(costs, ctas, fold, snake):
    """Per-CTA loads of the static round-robin (StaticTileScheduler / varlen_work_index)."""
    units = len(costs) // 2 if fold else len(costs)
    g = min(ctas, units)
    loads = [0] * g
    for b in range(g):
        r = 0
        while (idx := round_robin_index(r, g, b, fold, snake)) < len(costs):
            loads[b] += costs[idx]
            r += 1
    return loads


def dynamic_loads(costs, ctas):
    """Per-CTA loads when CTA b starts with tile b and each later tile goes to the first CTA free."""
    g = min(ctas, len(costs))
    heap = [(costs[b], b) for b in range(g)]
    heapq.heapify(heap)
    loads = [c for c in costs[:g]]
    for c in costs[g:]:
        t, b = heapq.heappop(heap)
        loads[b] = t + c
        heapq.heappush(heap, (t + c, b))
    return loads


def model(shape, lens, ctas):
    """Makespans (busiest CTA) of the packed call under both orders and of the fixed-length calls."""
    costs = packed_tiles(shape, lens)
    snake_packed = shape.causal and not shape.fold  # the balanced order deals in snake rounds
    packed_static = max(static_loads(costs, ctas, shape.fold, snake_packed))
    packed_dynamic = max(dynamic_loads(costs, ctas))
    fixed, fixed_mean = 0, 0.0
    for length in sorted(set(lens), reverse=True):
        c = fixed_tiles(shape, length, lens.count(length))
        snake = shape.causal and not shape.fold and length >= 4096  # heuristics::causal_snake_order
        loads = static_loads(c, ctas, shape.fold, snake)
        fixed += max(loads)
        fixed_mean += sum(c) / len(loads)
    return {
        "mean": sum(costs) / ctas,
        "packed_static": packed_static,
        "packed_dynamic": packed_dynamic,
        "fixed": fixed,
        "fixed_mean": fixed_mean,
    }


def parse_mix(text):
    if text == "powers":
        return list(POWERS_MIX)
    if text == "uniform":
        return random_mix(0)
    length, _, batch = text.partition("x")
    if not (length.isdigit() and batch.isdigit()):
        raise argparse.ArgumentTypeError(f"mix must be powers, uniform or LxB (e.g. 2048x16), not {text!r}")
    return [int(length)] * int(batch)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hdim", type=int, default=64, choices=(64, 128, 256), help="64: 192-row tiles, else 128")
    ap.add_argument("--block-n", type=int, default=128, help="keys per key block (FP8: 128)")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--ctas", type=int, default=132, help="persistent grid (the H200's SMs)")
    ap.add_argument("--mix", type=parse_mix, default="powers", help="powers, uniform or LxB")
    ap.add_argument("--overhead", type=float, default=2.0, help="per-tile cost in key blocks")
    args = ap.parse_args(argv)
    print("| mask | packed static / mean | packed dynamic / mean | fixed / its mean | packed static / fixed "
          "| packed dynamic / fixed |")
    print("|---|---:|---:|---:|---:|---:|")
    for causal in (False, True):
        shape = Shape(192 if args.hdim == 64 else 128, args.block_n, args.heads, causal, args.overhead)
        m = model(shape, args.mix, args.ctas)
        print(f"| {'causal' if causal else 'full'} | {m['packed_static'] / m['mean']:.3f} | "
              f"{m['packed_dynamic'] / m['mean']:.3f} | {m['fixed'] / m['fixed_mean']:.3f} | "
              f"{m['packed_static'] / m['fixed']:.3f} | {m['packed_dynamic'] / m['fixed']:.3f} |")


if __name__ == "__main__":
    main()
