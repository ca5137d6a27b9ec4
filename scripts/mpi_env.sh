# SPDX-License-Identifier: BSD-3-Clause
# Sourced by dsp's scripts: lets Open MPI run as root and start more ranks than cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
