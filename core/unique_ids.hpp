#pragma once

// The unique ids of a batch, ascending, and each id's index among them: what an embedding
// table's rows are read and updated by (core/graph/graph.cpp, the PS tasks' row requests).

#include <cstddef>
#include <cstdint>
#include <vector>

namespace troupe::core {

/// The unique ids of `ids`, ascending, and for each id the index of its row among them.
void unique_ids(const std::vector<int64_t>& ids, std::vector<int64_t>& unique,
                std::vector<int32_t>& index);
/// The same over the `n` ids at `ids`.
void unique_ids(const int64_t* ids, size_t n, std::vector<int64_t>& unique,
                std::vector<int32_t>& index);

}  // namespace troupe::core
