// Re-views of a WGMMA accumulator fragment: as (row, col) for the softmax and masks, and as the
// register A operand of the next WGMMA (P = softmax(S) feeding O += P V without touching smem).
// Both are pure layout algebra on CuTe fragments: no data moves.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/array.h>
#include <cutlass/numeric_conversion.h>

namespace hopattn::sm90::ws {

// A WGMMA fp32 accumulator fragment has layout ((2, 2, N/8), MMA_M, MMA_N): per thread, two
// adjacent columns, two rows 8 apart, N/8 column groups. Row-col view: ((2, MMA_M), (2, N/8, MMA_N)),
// so mode 0 indexes the rows this thread holds and mode 1 the columns of one such row.
template <class Layout>
__device__ __forceinline__ constexpr auto acc_rowcol_layout(Layout l) {
  using namespace cute;
  static_assert(decltype(rank<0>(l))::value == 3, "expects a WGMMA accumulator layout");
  return make_layout(make_layout(get<0, 1>(l), get<1>(l)), make_layout(get<0, 0>(l), get<0, 2>(l), get<2>(l)));
}

template <class Tensor>
__device__ __forceinline__ auto acc_rowcol(Tensor&& t) {
  return cute::make_tensor(t.data(), acc_rowcol_layout(t.layout()));
}

// The accumulator of an m64nNk16 WGMMA, converted to 16-bit, is exactly the register A operand of
// an m64nDk16 RS WGMMA whose K spans those N columns: the A fragment of one k16 step holds
// ((2 cols, 2 rows, 2 col-halves of 8)), i.e. two consecutive column groups of the accumulator.
// So split N/8 into (2, N/16) and move the N/16 part to the K mode: ((2,2,2), MMA_M, (N/16, MMA_N)).
template <class Layout>
__device__ __forceinline__ constexpr auto acc_to_a_operand_layout(Layout l) {
  using namespace cute;
  static_assert(decltype(size<0, 2>(l))::value % 2 == 0, "accumulator N must be a multiple of 16");
  auto split = logical_divide(l, Shape<Shape<_1, _1, _2>, _1, _1>{});  // ((2,2,(2,N/16)), M, N')
  return make_layout(make_layout(get<0, 0>(split), get<0, 1>(split), get<0, 2, 0>(split)), get<1>(split),
                     make_layout(get<0, 2, 1>(split), get<2>(split)));
}

// dst = convert(src) element by element in register order. Fragments that are re-views of one
// another (as above) share register order, so this converts S into P's A-operand view directly.
// The array converter packs pairs (cvt.rn.bf16x2.f32 / f16x2), one instruction per two values.
template <class SrcTensor, class DstTensor>
__device__ __forceinline__ void convert_fragment(const SrcTensor& src, DstTensor& dst) {
  using From = typename SrcTensor::value_type;
  using To = typename DstTensor::value_type;
  constexpr int kN = decltype(cute::size(src))::value;
  static_assert(decltype(cute::size(dst))::value == kN);
  auto& from = *reinterpret_cast<const cutlass::Array<From, kN>*>(src.data());
  auto& to = *reinterpret_cast<cutlass::Array<To, kN>*>(dst.data());
  to = cutlass::NumericArrayConverter<To, From, kN>{}(from);
}

}  // namespace hopattn::sm90::ws
