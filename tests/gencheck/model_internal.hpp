// tests/gencheck/model_internal.hpp - what model.cpp (posts) and
// model_take.cpp (the owner's side) share: the repairs a producer or an
// owner makes of a slot a dead process holds (R1-R3), and adding a state to
// a list once.
#pragma once

#include <cstdint>
#include <vector>

#include "model.hpp"

namespace gencheck {

// Held by a process that died (a dead claim, a dead owner's or evictor's slot).
bool held_by_dead(kind k);
// Counts and frees every owner_done entry of lane l (finish_dead_commit).
void finish_done(model& m, std::uint32_t l);
// Repairs the slot at `key` of lane l, held by a dead process (R1-R3);
// `evict`: an uncommitted one of a dead owner is evicted (drop_oldest),
// counted in *evicted. False when it cannot be repaired.
bool repair(model& m, std::uint32_t l, std::uint64_t key, bool evict, std::uint32_t* evicted);
// Appends m to v unless an equal state is there.
void add_unique(std::vector<model>& v, model m);

}  // namespace gencheck
