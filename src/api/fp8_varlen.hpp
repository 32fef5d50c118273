// Validation of the FP8 varlen entry points (api_fp8_varlen.cpp; defined in validate_fp8.cpp).
#pragma once

#include "api/problem.hpp"

namespace hopattn {

// attention_fp8_varlen: 16-bit packed q/k/v/out, the varlen checks run with Backend::kSm90Fp8.
Result validate_attention_fp8_varlen(const Fp8VarlenAttentionArgs& args, VarlenProblem* problem);
// forward_fp8_varlen: e4m3 packed q/k/v, then the descales (per sequence, blocks of max_seqlen);
// fills both the varlen problem (for the index checks) and the kernel's problem.
Result validate_forward_fp8_varlen(const Fp8VarlenForwardArgs& args, VarlenProblem* varlen, Fp8AttnProblem* problem);

}  // namespace hopattn
