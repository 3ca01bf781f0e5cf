/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* vmm.c - the test backend with virtual memory, for expandable segments: two devices, 1 and 2 GiB. */
#define FAKE_NAME "vmm"
#define FAKE_VMM 1
#include "fake.h"
