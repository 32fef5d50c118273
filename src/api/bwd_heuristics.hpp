// Host-side schedule switches of the backward kernels (docs/perf-notes.md, "Backward"). Apart from
// heuristics.hpp so that retuning one recompiles the backward launchers only, not the forward's.
#pragma once

namespace hopattn::heuristics {

// Overrides for A/B runs; a negative field means "use the default". Initialised once from the
// environment.
struct BwdTuning {
  int key_blocks_inner = -1;  // HOPATTN_BWD_KEY_BLOCKS_INNER=0/1
  int dq_first_store = -1;    // HOPATTN_BWD_DQ_FIRST_STORE=0/1
  int pdl = -1;               // HOPATTN_BWD_PDL=0/1
  int section_heads = -1;     // HOPATTN_BWD_SECTION_HEADS=N (N >= 1 heads per launch section)
  int dq_overlap = -1;        // HOPATTN_BWD_DQ_OVERLAP=0/1
  int tail_split = -1;        // HOPATTN_BWD_TAIL_SPLIT=0 (off) / 1 (the model) / N >= 2 (N parts, forced)
};
BwdTuning& bwd_tuning();

// Causal: whether the key blocks of one head are launched side by side (L2 locality of that head's
// Q, dO and dQ accumulator) rather than longest-first across heads.
bool bwd_causal_key_blocks_inner();

// Causal fixed-length problems: how many (batch, kv head) pairs form one launch section
// (sm90/bwd/launch_order.hpp), given the bytes one of them streams (Q, dO and the dQ accumulator of
// its query heads) and their number. As many as fit in an L2 budget, rounded down to a power of
// two, at least 1 and at most `heads`. key_blocks_inner = 0 forces `heads` (longest first across the
// whole problem), HOPATTN_BWD_SECTION_HEADS=N forces N (1 = the key blocks of one head side by side).
int bwd_causal_section_heads(long long bytes_per_head, int heads);

// Head_dim 64 and 128: whether the dQ accumulator is left unzeroed and each tile's first partial
// stored (sm90/bwd/workspace.hpp, dq_first_store). 0 forces the zeroed accumulator.
bool bwd_dq_first_store();

// Whether the main kernel and the postprocess are launched with programmatic stream serialisation
// behind the kernel before them (sm90/grid_dependency.cuh). Off by default; 1 turns it on.
bool bwd_programmatic_launch();

// Head_dim 256: whether the dQ postprocess overlaps the main kernel's last wave (sm90/bwd/
// workspace.hpp, dq_overlap). 0 launches it behind the whole main grid.
bool bwd_dq_overlap();
// Head_dim 256 without a mask: the split of the grid's last units (sm90/bwd/workspace.hpp,
// TailSplit). 0: none; 1: bwd_tail_split's choice; N >= 2: every unit up to the workspace's slots
// in N parts (a test knob: pieces at shapes too small for the model to split).
int bwd_tail_split_mode();

}  // namespace hopattn::heuristics
