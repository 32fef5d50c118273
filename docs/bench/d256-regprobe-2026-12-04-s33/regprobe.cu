// Register probe (not part of the library; docs/design-backward.md, "Next for d256"). Build:
//   nvcc -std=c++17 -O3 -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED -gencode arch=compute_90a,code=sm_90a
//        -Isrc -Iinclude -I<cutlass include> -Xptxas -v -c regprobe.cu  [-DSLICE_DQ=1 [-DDK_AFTER_DQ=1]] [-DNO_DQ=1]
// Register probe (not part of the library): the per-thread state and GEMM sequence of a d256
// backward consumer on 64-query x 80-key steps with both warpgroups splitting every GEMM
// (docs/design-backward.md, "Next for d256"). Only ptxas's register report and spills matter here;
// the shared-memory layouts are canonical per-operand buffers, not a real byte-shared design.
#include <cute/tensor.hpp>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/bfloat16.h>
#include "sm90/ws/mainloop.cuh"
#include "sm90/ws/fragment_layout.cuh"

using namespace cute;
using Elt = cutlass::bfloat16_t;
constexpr int BM = 64, BN = 80, HD = 256;
constexpr bool kSeparateDsForDq = true;
#ifndef SLICE_DQ
#define SLICE_DQ 0
#endif
constexpr bool kSliceDq = SLICE_DQ;
#ifndef DK_AFTER_DQ
#define DK_AFTER_DQ 0
#endif
constexpr bool kDkAfterDq = DK_AFTER_DQ;  // sliced only: dK^T issued after both dQ^T halves are done
#ifndef NO_DQ
#define NO_DQ 0
#endif
constexpr bool kNoDq = NO_DQ;  // no dQ GEMM at all: the rest of the step's register need

using SLQ = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Elt>{}, Shape<Int<BM>, Int<HD>>{}));    // Q, dO (q x hd)
using SLK = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Elt>{}, Shape<Int<BN>, Int<HD>>{}));    // K, V (keys x hd)
using SLQt = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<Elt>{}, Shape<Int<HD>, Int<BM>>{}));  // Q^T, dO^T as A (M=hd, K=q)
using SLKt = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<Elt>{}, Shape<Int<HD>, Int<BN>>{}));  // K^T as A (M=hd, K=keys)
using SLPt = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Elt>{}, Shape<Int<BN>, Int<BM>>{}));   // P^T, dS^T as B (N=keys, K=q)
using SLdS = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<Elt>{}, Shape<Int<BM>, Int<BN>>{}));  // dS^T as B of dQ^T (N=q, K=keys)

struct Smem {
  array_aligned<Elt, cosize_v<SLQ>, 1024> q, dout;
  array_aligned<Elt, cosize_v<SLK>, 1024> k, v;
  array_aligned<Elt, cosize_v<SLQt>, 1024> qt, dot;
  array_aligned<Elt, cosize_v<SLKt>, 1024> kt;
  array_aligned<Elt, cosize_v<SLPt>, 1024> pt, dst;
  array_aligned<Elt, cosize_v<SLdS>, 1024> ds;
  float lse[BM], dpsum[BM];
};

__global__ void __launch_bounds__(384, 1) probe(float* dq_accum, Elt* dk_out, Elt* dv_out, int steps, float scale_log2) {
  extern __shared__ char smem_raw[];
  Smem& ss = *reinterpret_cast<Smem*>(smem_raw);
  if (threadIdx.x < 128) { cutlass::arch::warpgroup_reg_dealloc<24>(); return; }
  cutlass::arch::warpgroup_reg_alloc<240>();
  const int t = threadIdx.x - 128;
  // S = Q K^T and dP = dO V^T: the two warpgroups split the 80 keys (N = 40 each).
  auto mma_s = make_tiled_mma(GMMA::ss_op_selector<Elt, Elt, float, Shape<Int<BM>, _40, _64>, GMMA::Major::K, GMMA::Major::K>(),
                              Layout<Shape<_1, _2, _1>>{});
  // dV^T += dO^T P^T', dK^T += Q^T dS: M = head_dim split across the warpgroups (128 each), N = 80 keys, K = 64 queries.
  auto mma_kv = make_tiled_mma(GMMA::ss_op_selector<Elt, Elt, float, Shape<_64, Int<BN>, _64>, GMMA::Major::MN, GMMA::Major::K>(),
                               Layout<Shape<_2, _1, _1>>{});
  // dQ^T = K^T dS^T: M = head_dim (128 a warpgroup), N = 64 queries, K = 80 keys.
  auto mma_dq = make_tiled_mma(GMMA::ss_op_selector<Elt, Elt, float, Shape<_64, Int<BM>, _16>, GMMA::Major::MN, GMMA::Major::MN>(),
                               Layout<Shape<_2, _1, _1>>{});
  auto th_s = mma_s.get_thread_slice(t);
  auto th_kv = mma_kv.get_thread_slice(t);
  auto th_dq = mma_dq.get_thread_slice(t);
  Tensor dVt = partition_fragment_C(mma_kv, Shape<Int<HD>, Int<BN>>{});
  Tensor dKt = partition_fragment_C(mma_kv, Shape<Int<HD>, Int<BN>>{});
  clear(dVt);
  clear(dKt);
  Tensor cS = th_s.partition_C(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));
  for (int m = 0; m < steps; ++m) {
    int zero;  // opaque 0: keeps ptxas from hoisting (and spilling) the loop-invariant descriptors
    asm volatile("mov.b32 %0, 0;" : "=r"(zero));
    const int z = zero;
    Tensor sQ = make_tensor(make_smem_ptr(z + ss.q.data()), SLQ{});
    Tensor sdO = make_tensor(make_smem_ptr(z + ss.dout.data()), SLQ{});
    Tensor sK = make_tensor(make_smem_ptr(z + ss.k.data()), SLK{});
    Tensor sV = make_tensor(make_smem_ptr(z + ss.v.data()), SLK{});
    Tensor sQt = make_tensor(make_smem_ptr(z + ss.qt.data()), SLQt{});
    Tensor sdOt = make_tensor(make_smem_ptr(z + ss.dot.data()), SLQt{});
    Tensor sKt = make_tensor(make_smem_ptr(z + ss.kt.data()), SLKt{});
    Tensor sPt = make_tensor(make_smem_ptr(z + ss.pt.data()), SLPt{});
    Tensor sdSt = make_tensor(make_smem_ptr(z + ss.dst.data()), SLPt{});
    Tensor sdS = make_tensor(make_smem_ptr(z + ss.ds.data()), SLdS{});
    Tensor aQ = th_s.partition_fragment_A(sQ);
    Tensor bK = th_s.partition_fragment_B(sK);
    Tensor adO = th_s.partition_fragment_A(sdO);
    Tensor bV = th_s.partition_fragment_B(sV);
    Tensor adOt = th_kv.partition_fragment_A(sdOt);
    Tensor bPt = th_kv.partition_fragment_B(sPt);
    Tensor aQt = th_kv.partition_fragment_A(sQt);
    Tensor bdSt = th_kv.partition_fragment_B(sdSt);
    Tensor aKt = th_dq.partition_fragment_A(sKt);
    Tensor bdS = th_dq.partition_fragment_B(sdS);
    Tensor S = partition_fragment_C(mma_s, Shape<Int<BM>, Int<BN>>{});
    Tensor dP = partition_fragment_C(mma_s, Shape<Int<BM>, Int<BN>>{});
    hopattn::sm90::ws::wgmma_issue<true>(mma_s, aQ, bK, S);
    hopattn::sm90::ws::wgmma_issue<true>(mma_s, adO, bV, dP);
    warpgroup_wait<1>();
    CUTE_UNROLL
    for (int i = 0; i < size(S); ++i) S(i) = exp2f(S(i) * scale_log2 - ss.lse[get<0>(cS(i))]);
    warpgroup_wait<0>();
    CUTE_UNROLL
    for (int i = 0; i < size(S); ++i) dP(i) = S(i) * (dP(i) - ss.dpsum[get<0>(cS(i))]);
    {
      // P^T and dS^T into (keys x q, q contiguous) tiles by transposing stmatrix, as the key split does.
      Tensor rP = make_tensor_like<Elt>(S);
      Tensor rdS = make_tensor_like<Elt>(dP);
      CUTE_UNROLL
      for (int i = 0; i < size(S); ++i) { rP(i) = Elt(S(i)); rdS(i) = Elt(dP(i)); }
      auto st = make_tiled_copy_C(Copy_Atom<SM90_U16x4_STSM_T, Elt>{}, mma_s);
      auto th = st.get_thread_slice(t);
      Tensor vPt = make_tensor(sPt.data(), select<1, 0>(sPt.layout()));    // (q, keys) view
      Tensor vdSt = make_tensor(sdSt.data(), select<1, 0>(sdSt.layout()));
      copy(st, th.retile_S(rP), th.partition_D(vPt));
      copy(st, th.retile_S(rdS), th.partition_D(vdSt));
      if constexpr (kSeparateDsForDq) copy(st, th.retile_S(rdS), th.partition_D(sdS));
    }
    cutlass::arch::fence_view_async_shared();
    cutlass::arch::NamedBarrier::sync(256, 8);
    hopattn::sm90::ws::wgmma_issue<false>(mma_kv, adOt, bPt, dVt);
    if constexpr (kNoDq) {
      hopattn::sm90::ws::wgmma_issue<false>(mma_kv, aQt, bdSt, dKt);
    } else if constexpr (!kSliceDq) {
      Tensor dQt = partition_fragment_C(mma_dq, Shape<Int<HD>, Int<BM>>{});
      hopattn::sm90::ws::wgmma_issue<true>(mma_dq, aKt, bdS, dQt);
      hopattn::sm90::ws::wgmma_issue<false>(mma_kv, aQt, bdSt, dKt);
      warpgroup_wait<1>();
      CUTE_UNROLL
      for (int i = 0; i < size(dQt); i += 4)  // FA3's d256: vector reduce-adds from registers
        atomicAdd(reinterpret_cast<float4*>(dq_accum + (int64_t(m) * 256 + t) * size(dQt) + i),
                  make_float4(dQt(i), dQt(i + 1), dQt(i + 2), dQt(i + 3)));
    } else {
      CUTE_UNROLL
      for (int h = 0; h < 2; ++h) {
        Tensor aKt_h = th_dq.partition_fragment_A(local_tile(sKt, Shape<_128, Int<BN>>{}, make_coord(h, 0)));
        Tensor dQt = partition_fragment_C(mma_dq, Shape<_128, Int<BM>>{});
        hopattn::sm90::ws::wgmma_issue<true>(mma_dq, aKt_h, bdS, dQt);
        if (h == 0 && !kDkAfterDq) {
          hopattn::sm90::ws::wgmma_issue<false>(mma_kv, aQt, bdSt, dKt);
          warpgroup_wait<1>();  // dV, dQ half 0 done; dK may run
        } else {
          warpgroup_wait<0>();
        }
        CUTE_UNROLL
        for (int i = 0; i < size(dQt); i += 4)
          atomicAdd(reinterpret_cast<float4*>(dq_accum + ((int64_t(m) * 2 + h) * 256 + t) * size(dQt) + i),
                    make_float4(dQt(i), dQt(i + 1), dQt(i + 2), dQt(i + 3)));
      }
    }
    if constexpr (kSliceDq && kDkAfterDq && !kNoDq) hopattn::sm90::ws::wgmma_issue<false>(mma_kv, aQt, bdSt, dKt);
    warpgroup_wait<0>();
    cutlass::arch::NamedBarrier::sync(256, 9);
  }
  Tensor cKV = th_kv.partition_C(make_identity_tensor(Shape<Int<HD>, Int<BN>>{}));
  CUTE_UNROLL
  for (int i = 0; i < size(dKt); ++i) {
    dk_out[get<1>(cKV(i)) * HD + get<0>(cKV(i))] = Elt(dKt(i));
    dv_out[get<1>(cKV(i)) * HD + get<0>(cKV(i))] = Elt(dVt(i));
  }
}
