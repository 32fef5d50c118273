#!/usr/bin/env python3
"""The model behind backward v13's prediction (docs/perf-notes.md): how evenly the causal backward's
CTAs fill the GPU in a given launch order. No GPU needed.

One CTA per key block of one (batch, kv head) ("unit"); it takes `unit_us` plus `step_us` per query
step it walks (causal, square: key block n sees the query blocks from n * BN / BM on). The SMs take
units in launch order, each the next one as soon as it is free (list scheduling), one unit per SM at
a time (a backward CTA needs a whole SM). Efficiency = ideal time (all work / SMs) / makespan.

Orders (sm90/bwd/launch_order.hpp): section = 1 (the key blocks of one head side by side, the order
before v13), the L2-sized section of heuristics::bwd_causal_section_heads, and all heads in one
section (longest first across the whole problem).

  python3 bench/bwd_launch_model.py [--sms 132] [--step-us 2.4] [--unit-us 5]
"""
import argparse
import heapq

# hopattn's per-head-dim backward tiles: (query rows per step, keys per CTA), and the grid's heads.
TILES = {64: (128, 128, 32), 128: (64, 128, 16), 256: (64, 64, 8)}
L2_BUDGET = 40 << 20  # heuristics::bwd_causal_section_heads


def launch_unit(idx, n_blocks, heads, section):
    """(key block, head) of launch index idx: bwd_launch_unit in sm90/bwd/launch_order.hpp."""
    per_section = section * n_blocks
    s, r = divmod(idx, per_section)
    first = s * section
    width = min(section, heads - first)
    return r // width, first + r % width


def l2_section(bytes_per_head, heads):
    """heuristics::bwd_causal_section_heads without the overrides."""
    fit = L2_BUDGET // bytes_per_head if bytes_per_head > 0 else heads
    if fit >= heads:
        return heads
    section = 1
    while section * 2 <= fit:
        section *= 2
    return section


def makespan(durations, sms):
    free = [0.0] * sms
    end = 0.0
    for d in durations:
        t = heapq.heappop(free) + d
        end = max(end, t)
        heapq.heappush(free, t)
    return end


def efficiency(seqlen, head_dim, section, sms, step_us, unit_us):
    bm, bn, heads_per_batch = TILES[head_dim]
    heads = 16384 // seqlen * heads_per_batch  # the grid's batch x heads (16k tokens, hidden 2048)
    n_blocks, m_blocks = -(-seqlen // bn), -(-seqlen // bm)
    steps = [m_blocks - n * bn // bm for n in range(n_blocks)]
    order = [launch_unit(i, n_blocks, heads, section) for i in range(n_blocks * heads)]
    durations = [unit_us + step_us * steps[n] for n, _ in order]
    return sum(durations) / sms / makespan(durations, sms)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sms", type=int, default=132)
    p.add_argument("--step-us", type=float, default=2.4)
    p.add_argument("--unit-us", type=float, default=5.0)
    a = p.parse_args()
    print("| hdim | seqlen | L2 section | section 1 | L2 section | all heads |")
    print("|---:|---:|---:|---:|---:|---:|")
    for d in (64, 128, 256):
        for s in (1024, 2048, 4096, 8192, 16384):
            heads = 16384 // s * TILES[d][2]
            sec = l2_section(s * d * (2 * 2 + 4), heads)  # Q and dO in bf16, dQ accumulator in fp32
            e = [efficiency(s, d, x, a.sms, a.step_us, a.unit_us) for x in (1, sec, heads)]
            print(f"| {d} | {s} | {sec} | " + " | ".join(f"{x:.3f}" for x in e) + " |")


if __name__ == "__main__":
    main()
