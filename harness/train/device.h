// harness/train/device.h: what the catalog's availability checks see of the live device (LibTorch
// side; this header itself stays free of LibTorch so the CLI can include it).
#pragma once
#include "kernels/catalog.h"

namespace ablate::harness {
kernels::DeviceInfo live_device_info();
}  // namespace ablate::harness
