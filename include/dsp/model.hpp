// SPDX-License-Identifier: BSD-3-Clause
// dsp::model: a cluster model (hierarchical alpha-beta) that turns dsp's exact
// byte counts into predicted time for each sequence-parallel strategy on a
// spatial-temporal transformer, with FLOPs and memory; and the DSP paper's
// experiments as its inputs. Not part of <dsp/dsp.hpp>. The dsp-plan tool
// prints it; docs/cluster-model.md explains it.
#pragma once

#include <dsp/model/cluster.hpp>
#include <dsp/model/paper.hpp>
#include <dsp/model/transformer.hpp>
