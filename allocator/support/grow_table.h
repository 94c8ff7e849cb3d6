// replayalloc/support/grow_table.h: an Abseil hash table made large enough for one more
// element before it is inserted, so that an insert never grows it in place.
//
// Layer: support.
//
// Note [Tables that grow before they insert]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The engine's tables take their memory from the backend, which may run out (a real
// allocation failure, or REPLAYALLOC's injected ones in the tests), and the engine
// catches std::bad_alloc and goes on: the iteration passes through, the key is left
// alone, and the tables are used again. But Abseil's raw_hash_set::resize sets the new
// capacity before it allocates the new arrays: a growth that throws leaves the table
// with its old arrays and the new capacity, and the next clear(), insert or lookup
// reads and writes past those arrays (a recording's table of live blocks did exactly
// that: Bounds.OutOfMemoryOnAFreshThreadWhileRecordingNeverThrows died of a front-cache
// list whose next pointer was 0xb). So every insert into such a table first calls
// grow_for_insert(): where one more element could make the table grow (or, with its
// deleted slots, rehash), a larger table is made apart (a table constructed with a
// bucket count allocates before anything of it exists: a constructor that throws
// leaves nothing behind), the elements are copied into it and the two swapped; the
// table asked for is untouched if any of that throws. After it, absl's insert finds room
// or, where deleted slots fill the room, rehashes in place without allocating (it does
// so while the table is at most 25/32 full, which grow_for_insert keeps it). Growth
// costs a copy of the elements, as absl's own does.
#pragma once

#include <cstddef>

namespace replayalloc::detail {

// Abseil's in-place rehash limit (raw_hash_set::rehash_and_grow_if_necessary): a table
// of more than one group of slots, at most 25/32 full.
inline constexpr std::size_t table_least_capacity = 63;

template <class Table>
void grow_for_insert(Table& table) {
  const std::size_t capacity = table.bucket_count();
  if (capacity >= table_least_capacity && (table.size() + 1) * 32 <= capacity * 25) return;
  const std::size_t wanted = capacity < table_least_capacity ? table_least_capacity : capacity * 2 + 1;
  Table bigger(wanted, table.hash_function(), table.key_eq(), table.get_allocator());
  for (const auto& element : table) bigger.insert(element);
  table.swap(bigger);
}

}  // namespace replayalloc::detail
