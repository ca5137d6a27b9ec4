// SPDX-License-Identifier: BSD-3-Clause
// The dsp::compiled library: dsp's engine for host memory, compiled once.
// A program that links dsp::compiled (which defines DSP_COMPILED for it)
// declares these instantiations extern and compiles none of the engine in
// its own files; everything else stays header-only. See docs/api.md,
// "Header-only or compiled".
#define DSP_COMPILED_SOURCE 1

#include <dsp/dsp.hpp>
#ifdef DSP_COMPILED_WITH_MPI
#include <dsp/mpi.hpp>
#endif

namespace dsp::detail {

using Host = Kokkos::HostSpace;

template void run_operation<Host>(const OpGroup<Host>&, const OpArgs&, Signature&, std::string);
template std::unique_ptr<Flight<Host>> start_operation<Host>(const OpGroup<Host>&, std::shared_ptr<void>,
                                                             const OpArgs&, Signature, std::string);
template class Flight<Host>;
template void run_call<Host>(const OpGroup<Host>&, const CallFacts&);
template std::unique_ptr<Flight<Host>> start_call<Host>(const OpGroup<Host>&, std::shared_ptr<void>, const CallFacts&);
template void execute_local_copy<Host>(PortOn<Host>&, const CopyTask&, const void*, void*, std::size_t);
template void execute_split<Host>(PortOn<Host>&, std::span<const std::size_t>, std::size_t, const void*, void*,
                                  std::size_t);
template void run_from_root<Host>(PortOn<Host>&, Signature, std::string, const RootArgs&);
template void run_reshard<Host>(PortOn<Host>&, Signature, std::string, ReshardDesc, const void*, void*, std::size_t);
template void run_recut<Host>(PortOn<Host>&, Signature, std::string, std::span<const RecutArgs>);
template const void* recut_hooks<Host>();

template class PortOf<BasicSelfCommunicator<Host>, Host>;
#ifdef DSP_COMPILED_WITH_MPI
template class PortOf<BasicMpiCommunicator<Host>, Host>;
#endif

}  // namespace dsp::detail
