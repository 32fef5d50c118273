// The packed FP8 forward's work order. Kept out of heuristics.hpp, which every forward and
// backward launcher includes: a switch only the FP8 varlen launch reads should not rebuild them.
#pragma once

namespace hopattn::heuristics {

// Whether packed FP8 batches that are not folded draw their tiles from a counter in the workspace
// (the dynamic order, sm90/ws/tile_scheduler.hpp) rather than the static round-robin. On unless
// HOPATTN_WS_VARLEN_DYNAMIC=0; varlen_dynamic_override() is that variable's value (-1 when unset),
// which tuning runs and tests may set.
bool varlen_dynamic_order();
int& varlen_dynamic_override();

}  // namespace hopattn::heuristics
