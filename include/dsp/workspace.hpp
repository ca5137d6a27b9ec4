// SPDX-License-Identifier: BSD-3-Clause
// dsp: the communication workspaces and recycled outputs dsp keeps per
// communicator (core/buffers.hpp), as a user sees them: their size, and a
// way to free them.
#pragma once

#include <dsp/core/buffers.hpp>

#include <cstddef>
#include <type_traits>

namespace dsp {

/// Bytes of communication workspace dsp holds for `comm` in `MemorySpace`
/// (by default the communicator's). Local, not collective.
template <class MemorySpace = void, class Comm>
std::size_t workspace_bytes(const Comm& comm) {
  using M = std::conditional_t<std::is_void_v<MemorySpace>, typename Comm::memory_space, MemorySpace>;
  const auto* ws = comm.resources().template find<detail::Workspace<M>>();
  return ws ? ws->bytes() : 0;
}

/// Frees every cached communication workspace and every recycled output of
/// the allocating calls (dsp::dynamic_switch(x), dsp::gather(x)) of every
/// communicator; buffers still in use by a tensor stay with that tensor. The
/// next call allocates again. Local, not collective; not to be called while
/// another thread runs a dsp collective. Not needed before Kokkos::finalize,
/// which releases them, nor for a communicator about to be destroyed: its
/// caches go with its last copy.
inline void release_workspaces() { CommResources::release_all(); }

}  // namespace dsp
