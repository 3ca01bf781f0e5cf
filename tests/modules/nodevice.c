/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* nodevice.c - a test backend that loads but finds no device, and says why; it ranks first. */
#define FAKE_NAME "nodevice"
#define FAKE_DEVICES 0
#define FAKE_PRIORITY 60
#define FAKE_WHY "simulated runtime: no accelerator present"
#include "fake.h"
