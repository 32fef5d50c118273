// The order in which the backward's CTAs are launched: one CTA per key block of one (batch, kv
// head), "head" below. The hardware hands CTAs to SMs in blockIdx order, so this order is the
// schedule. Host and device share it so that the CPU tests can check the mapping.
#pragma once

#if defined(__CUDACC__)
#define HOPATTN_BWD_HD __host__ __device__
#else
#define HOPATTN_BWD_HD
#endif

namespace hopattn::sm90::bwd {

// The heads are cut into sections of `section` heads (the last one may be shorter). Sections run
// one after the other; inside a section key block 0 of every head goes first, then key block 1,
// and so on.
// - Causal, key block 0 sees the most query blocks, so inside a section the longest units start
//   first and the short ones fill the tail (longest processing time first).
// - A section's Q, dO and dQ accumulators are what its CTAs stream; the host sizes the section to
//   fit in L2 (bwd_causal_section_heads), so that they are read from and reduced into L2.
// section = 1: the key blocks of one head side by side (the inner order); section = heads: key
// block 0 of every head first (longest first across the whole problem).
struct BwdLaunchUnit {
  int n_block;     // key block
  int head_batch;  // kv_head + heads_kv * batch
};

HOPATTN_BWD_HD constexpr BwdLaunchUnit bwd_launch_unit(int idx, int n_blocks, int heads, int section) {
  // section * n_blocks <= heads * n_blocks = the grid, which the launcher keeps below INT_MAX.
  const int per_section = section * n_blocks;
  const int s = idx / per_section;
  const int r = idx - s * per_section;
  const int first = s * section;
  const int width = heads - first < section ? heads - first : section;
  return {r / width, first + r % width};
}

}  // namespace hopattn::sm90::bwd
