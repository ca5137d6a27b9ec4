#pragma once

#define DSP_VERSION_MAJOR 0
#define DSP_VERSION_MINOR 1
#define DSP_VERSION_PATCH 0
